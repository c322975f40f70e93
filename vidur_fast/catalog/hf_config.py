"""Reading a Hugging Face config.json into a ModelSpec, following the fields vLLM reads.

Dense and GQA attention (`head_dim`), sliding-window layers (`sliding_window`, `layer_types`,
`use_sliding_window` / `max_window_layers`), mixture-of-experts layers (`num_experts` /
`n_routed_experts` / `num_local_experts`, `num_experts_per_tok` / `experts_per_token`,
`moe_intermediate_size`, shared experts, `first_k_dense_replace`, `moe_layer_freq`,
`decoder_sparse_step`, `mlp_only_layers`), multi-head latent attention (`kv_lora_rank`,
`q_lora_rank`, `qk_rope_head_dim`, `qk_nope_head_dim`, `v_head_dim`), multi-token-prediction
layers (`num_nextn_predict_layers`), a language model nested in `text_config`, tied embeddings
and `quantization_config`.

What the simulator cannot read is an error naming the field, never a silent fallback: an
unknown `model_type`, an expert-related field outside the known set, a `layer_types` entry other
than full or sliding attention, a `quantization_config` method outside the known set.
"""

import json
import re
from dataclasses import replace
from pathlib import Path

from vidur_fast.catalog.arch import DENSE, FULL, MOE, SLIDING, MLASpec, MoESpec
from vidur_fast.errors import ConfigError

DENSE_TYPES = frozenset(
    {"llama", "mistral", "qwen2", "qwen3", "phi", "phi3", "internlm", "internlm2", "granite"}
)
MOE_TYPES = frozenset(
    {"mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "kimi_k2", "gpt_oss",
     "minimax_m2", "glm4_moe"}
)  # fmt: skip
# model_types that hold the language model in text_config (vision-language wrappers)
WRAPPER_TYPES = frozenset({"kimi_k25"})
KNOWN_TYPES = DENSE_TYPES | MOE_TYPES | WRAPPER_TYPES

EXPERT_COUNT_FIELDS = ("num_experts", "n_routed_experts", "num_local_experts")
TOP_K_FIELDS = ("num_experts_per_tok", "experts_per_token")
# Expert-related fields read here, and those that do not change the shape (routing scores,
# load-balancing losses, grouping of the top-k choice, training-only switches).
MOE_FIELDS_READ = frozenset(
    {*EXPERT_COUNT_FIELDS, *TOP_K_FIELDS, "moe_intermediate_size", "n_shared_experts",
     "shared_expert_intermediate_size", "shared_intermediate_size", "first_k_dense_replace",
     "moe_layer_freq", "decoder_sparse_step", "mlp_only_layers"}
)  # fmt: skip
MOE_FIELDS_SHAPELESS = frozenset(
    {"norm_topk_prob", "router_aux_loss_coef", "output_router_logits", "routed_scaling_factor",
     "topk_method", "ep_size", "use_routing_bias", "router_jitter_noise", "moe_router_topk",
     "moe_aux_loss_coeff", "router_z_loss_coef"}
)  # fmt: skip
MOE_FIELD = re.compile(r"expert|moe|rout", re.IGNORECASE)

# quantization_config: quant_method -> the format (compressed-tensors and modelopt are read
# from their inner fields)
QUANT_METHODS = {"fp8": "fp8", "mxfp4": "mxfp4", "awq": "int4_wo", "gptq": "int4_wo"}


def read_hf_config(path: Path) -> "ModelSpec":  # noqa: F821
    try:
        cfg = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"cluster.model: cannot read Hugging Face config {path}: {exc}") from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"cluster.model: {path} must hold a JSON object (a HF config.json)")
    return spec_from_hf(
        cfg, str(path), str(cfg.get("_name_or_path") or path.resolve().parent.name or path)
    )


def _int(cfg: dict, key: str, where: str, default=None, low: int = 1) -> int:
    value = cfg.get(key, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(
            f"cluster.model: {where}: {key} must be an integer >= {low} (got {value!r})"
        )
    return value


def _language_config(cfg: dict, where: str) -> dict:
    mt = cfg.get("model_type")
    if mt is not None and mt not in KNOWN_TYPES:
        raise ConfigError(
            f"cluster.model: {where}: model_type {mt!r} is not an architecture the simulator "
            f"reads (known: {', '.join(sorted(KNOWN_TYPES))})"
        )
    text = cfg.get("text_config")
    if text is None:
        if mt in WRAPPER_TYPES:
            raise ConfigError(f"cluster.model: {where}: model_type {mt!r} needs a text_config")
        return cfg
    if not isinstance(text, dict):
        raise ConfigError(f"cluster.model: {where}: text_config must be a JSON object")
    inner = _language_config(text, f"{where} text_config")
    merged = dict(inner)
    for key in ("quantization_config", "tie_word_embeddings"):
        if key not in merged and key in cfg:
            merged[key] = cfg[key]
    return merged


def _check_moe_fields(cfg: dict, where: str) -> None:
    for key in cfg:
        if MOE_FIELD.search(key) and key not in MOE_FIELDS_READ | MOE_FIELDS_SHAPELESS:
            raise ConfigError(
                f"cluster.model: {where}: field {key!r} ({cfg[key]!r}) is an expert setting the "
                "simulator does not read; it may change the model's shape"
            )


def _moe(cfg: dict, where: str, n_layers: int, dense_width: int):
    """(MoESpec, per-layer mlp kinds, dense width) or (None, (), dense_width)."""
    field = next((k for k in EXPERT_COUNT_FIELDS if cfg.get(k)), None)
    if field is None:
        return None, (), dense_width
    n = _int(cfg, field, where)
    top_key = next((k for k in TOP_K_FIELDS if cfg.get(k) is not None), TOP_K_FIELDS[0])
    top_k = _int(cfg, top_key, where)
    if top_k > n:
        raise ConfigError(f"cluster.model: {where}: {top_key} {top_k} exceeds {field} {n}")
    has_moe_width = cfg.get("moe_intermediate_size") is not None
    width = _int(cfg, "moe_intermediate_size" if has_moe_width else "intermediate_size", where)
    n_shared, shared_dim = 0, 0
    if cfg.get("n_shared_experts"):
        n_shared, shared_dim = _int(cfg, "n_shared_experts", where), width
    for key in ("shared_expert_intermediate_size", "shared_intermediate_size"):
        if cfg.get(key):
            if n_shared:
                raise ConfigError(f"cluster.model: {where}: {key} and n_shared_experts both set")
            n_shared, shared_dim = 1, _int(cfg, key, where)
    first_dense = _int(cfg, "first_k_dense_replace", where, 0, low=0)
    freq = _int(cfg, "moe_layer_freq", where, 1)
    step = _int(cfg, "decoder_sparse_step", where, 1)
    only = cfg.get("mlp_only_layers") or []
    if not isinstance(only, list) or not all(isinstance(i, int) for i in only):
        raise ConfigError(f"cluster.model: {where}: mlp_only_layers must be a list of integers")
    kinds = tuple(
        MOE if (i >= first_dense and i % freq == 0 and (i + 1) % step == 0 and i not in only)
        else DENSE
        for i in range(n_layers)
    )  # fmt: skip
    if DENSE in kinds and not has_moe_width:
        raise ConfigError(
            f"cluster.model: {where}: dense layers need moe_intermediate_size beside "
            "intermediate_size (the dense width)"
        )
    spec = MoESpec(n, top_k, width, n_shared, shared_dim, field)
    return spec, kinds, dense_width if has_moe_width else width


def _mla(cfg: dict, where: str):
    if not cfg.get("kv_lora_rank"):
        return None
    return MLASpec(
        kv_lora_rank=_int(cfg, "kv_lora_rank", where),
        q_lora_rank=_int(cfg, "q_lora_rank", where, 0, low=0),
        qk_rope_head_dim=_int(cfg, "qk_rope_head_dim", where),
        qk_nope_head_dim=_int(cfg, "qk_nope_head_dim", where),
        v_head_dim=_int(cfg, "v_head_dim", where),
    )


def _attention_kinds(cfg: dict, where: str, n_layers: int) -> tuple[tuple[str, ...], int]:
    types = cfg.get("layer_types")
    window = cfg.get("sliding_window")
    if types is not None:
        names = {"full_attention": FULL, "sliding_attention": SLIDING}
        if not isinstance(types, list) or len(types) != n_layers:
            raise ConfigError(
                f"cluster.model: {where}: layer_types must list one entry per layer ({n_layers})"
            )
        bad = next((t for t in types if t not in names), None)
        if bad is not None:
            raise ConfigError(
                f"cluster.model: {where}: layer_types entry {bad!r} is not modelled "
                "(known: full_attention, sliding_attention)"
            )
        kinds = tuple(names[t] for t in types)
    elif window is None or cfg.get("use_sliding_window") is False:
        kinds = (FULL,) * n_layers
    elif cfg.get("use_sliding_window") and cfg.get("max_window_layers") is not None:
        first = _int(cfg, "max_window_layers", where, low=0)
        kinds = tuple(SLIDING if i >= first else FULL for i in range(n_layers))
    else:
        kinds = (SLIDING,) * n_layers
    if SLIDING not in kinds:
        return (), 0
    return kinds, _int(cfg, "sliding_window", where)


def _group_of(pattern: str) -> str | None:
    p = pattern.lower()
    if "shared_expert" in p:
        return "shared_experts"
    if "expert" in p:
        return "experts"
    if "attn" in p or "attention" in p:
        return "attention"
    if re.search(r"mlp\W*\(?(gate|up|down)", p):
        return "dense_mlp"
    if "lm_head" in p:
        return "lm_head"
    if "embed" in p:
        return "embeddings"
    if re.search(r"(router|\bgate\b|mlp\.gate$)", p):
        return "router"
    return None


def _quantization(cfg: dict, where: str) -> tuple[str, tuple[str, ...], int]:
    q = cfg.get("quantization_config")
    if q is None:
        return "", (), 0
    field = "quantization_config.quant_method"
    if not isinstance(q, dict):
        raise ConfigError(f"cluster.model: {where}: quantization_config must be a JSON object")
    method = str(q.get("quant_method", "")).lower()
    group_size = 0
    if method == "fp8":
        fmt = "fp8_block" if q.get("weight_block_size") else "fp8"
    elif method in QUANT_METHODS:
        fmt = QUANT_METHODS[method]
        if fmt == "int4_wo":
            if q.get("bits", 4) != 4:
                raise ConfigError(f"cluster.model: {where}: {method} bits {q.get('bits')!r}: "
                                  "only 4-bit weights are modelled")  # fmt: skip
            group_size = int(q.get("group_size") or 128)
    elif method == "modelopt":
        algo = str(q.get("quant_algo", "")).upper()
        fmt = {"FP8": "fp8", "NVFP4": "nvfp4"}.get(algo, "")
        if not fmt:
            raise ConfigError(f"cluster.model: {where}: quantization_config.quant_algo "
                              f"{algo!r} is not modelled (known: FP8, NVFP4)")  # fmt: skip
    elif method == "compressed-tensors":
        fmt, group_size = _compressed_tensors(q, where)
    else:
        raise ConfigError(
            f"cluster.model: {where}: {field} {method!r} is not modelled (known: fp8, mxfp4, "
            "awq, gptq, modelopt, compressed-tensors)"
        )
    skipped = q.get("modules_to_not_convert") or q.get("ignore") or q.get("exclude_modules")
    skipped_groups = {_group_of(str(p)) for p in skipped or []}
    groups = tuple(
        g for g in ("attention", "dense_mlp", "experts", "shared_experts")
        if g not in skipped_groups
    )  # fmt: skip
    return fmt, groups, group_size


def _compressed_tensors(q: dict, where: str) -> tuple[str, int]:
    field = "quantization_config.config_groups"
    groups = q.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise ConfigError(f"cluster.model: {where}: {field} must be a non-empty object")
    formats = set()
    size = 0
    for g in groups.values():
        w = (g or {}).get("weights") or {}
        bits, kind = w.get("num_bits"), w.get("type")
        act = (g or {}).get("input_activations")
        if bits == 4 and kind == "int" and not act:
            formats.add("int4_wo")
            size = int(w.get("group_size") or 128)
        elif bits == 4 and kind == "float":
            formats.add("nvfp4")
        elif bits == 8 and kind == "float":
            formats.add("fp8_block" if w.get("block_structure") else "fp8")
        else:
            raise ConfigError(
                f"cluster.model: {where}: {field} weights num_bits={bits!r} type={kind!r} "
                "are not modelled (known: 4-bit int weight-only, 4-bit float, 8-bit float)"
            )
    if len(formats) != 1:
        raise ConfigError(f"cluster.model: {where}: {field} mixes formats {sorted(formats)}")
    return formats.pop(), size


def _mtp_layers(cfg: dict, where: str) -> int:
    if cfg.get("num_nextn_predict_layers"):
        return _int(cfg, "num_nextn_predict_layers", where, 0, low=0)
    if cfg.get("use_mtp") and cfg.get("num_mtp_modules"):
        modules = _int(cfg, "num_mtp_modules", where, 0, low=0)
        return modules * _int(cfg, "mtp_transformer_layers", where, 1)
    return 0


def spec_from_hf(cfg: dict, where: str, name: str):
    """A ModelSpec from a parsed config.json (`where` names it in errors)."""
    from vidur_fast.catalog.models import dense_from_hf

    lang = _language_config(cfg, where)
    _check_moe_fields(lang, where)
    base = dense_from_hf(lang, where, name)
    n_layers = base.num_layers
    moe, mlp_kinds, dense_width = _moe(lang, where, n_layers, base.mlp_hidden_dim)
    mla = _mla(lang, where)
    attn_kinds, window = _attention_kinds(lang, where, n_layers)
    quant, groups, group_size = _quantization(lang, where)
    extra = dict(
        model_type=str(lang.get("model_type") or ""),
        qk_norm=base.qk_norm or bool(lang.get("use_qk_norm")),
        num_mtp_layers=_mtp_layers(lang, where),
        quantization=quant,
        quantized_groups=groups,
        quant_group_size=group_size,
    )
    if moe is not None:
        extra.update(moe=moe, mlp_layers=mlp_kinds, mlp_hidden_dim=dense_width)
    if mla is not None:
        extra.update(
            mla=mla,
            num_kv_heads=base.num_q_heads,
            head_dim=mla.qk_nope_head_dim + mla.qk_rope_head_dim,
        )
    if attn_kinds:
        extra.update(layer_attention=attn_kinds, sliding_window=window)
    return replace(base, **extra)
