"""Model architecture catalog: shipped JSON entries or a local Hugging Face config.json."""

import math
from dataclasses import dataclass
from pathlib import Path

from vidur_fast.catalog import arch
from vidur_fast.catalog._load import load_catalog
from vidur_fast.catalog.arch import MLASpec, MoESpec, ParamCount
from vidur_fast.errors import ConfigError


@dataclass(frozen=True)
class ModelSpec:
    """Decoder-only transformer shape (what the timing and memory models need).

    The fields up to `notes` describe a dense GQA model. The fields after them (all defaulted,
    so a dense entry is unchanged) describe what else a Hugging Face config.json can state:
    MoE layers, multi-head latent attention, sliding-window layers, multi-token-prediction
    layers and the checkpoint's weight quantization (see docs/models.md).
    """

    name: str
    num_layers: int
    num_q_heads: int
    num_kv_heads: int
    embedding_dim: int
    head_dim: int
    mlp_hidden_dim: int
    use_gated_mlp: bool = True
    vocab_size: int = 32000
    max_position_embeddings: int = 4096
    post_attn_norm: bool = True
    norm: str = "rms"
    activation: str = "silu"
    qkv_bias: bool = False
    qk_norm: bool = False
    tie_word_embeddings: bool = False
    rope_theta: float = 10000.0
    notes: str = ""
    model_type: str = ""
    """The config.json model_type ("" for catalog entries of dense models)."""
    mlp_layers: tuple[str, ...] = ()
    """Per layer "dense" or "moe"; () = every layer dense."""
    moe: MoESpec | None = None
    mla: MLASpec | None = None
    layer_attention: tuple[str, ...] = ()
    """Per layer "full" or "sliding"; () = every layer full attention."""
    sliding_window: int = 0
    """Tokens a sliding layer attends to (0 without sliding layers)."""
    num_mtp_layers: int = 0
    """Multi-token-prediction layers stored with the checkpoint (counted, not run)."""
    quantization: str = ""
    """Weight quantization the checkpoint states ("" = stored in its bf16/fp16 dtype)."""
    quantized_groups: tuple[str, ...] = ()
    """Weight groups (arch.WEIGHT_GROUPS) stored at `quantization`; the rest are bf16."""
    quant_group_size: int = 0
    """Elements per scale of a group-quantized format (int4 weight-only), 0 otherwise."""

    @property
    def is_dense(self) -> bool:
        """No MoE, MLA or sliding-window layers: what every timing source covers."""
        return not arch.beyond_dense_features(self)

    def unmodelled_features(self) -> list[str]:
        """Short names of the features the timing does not model yet (MoE, MLA, ...)."""
        return [name for _, name in arch.unmodelled_features(self)]

    def check_modelled(self, field: str = "cluster.model") -> None:
        """Raise ConfigError naming the first feature (and its config field) that the timing
        and engine do not model yet; a dense model passes."""
        message = arch.unmodelled_message(self)
        if message:
            raise ConfigError(f"{field}: {message}")

    @property
    def param_count(self) -> ParamCount:
        """Every weight by group (embeddings, norms, experts; MTP layers apart)."""
        return arch.param_count(self)

    @property
    def params_total(self) -> int:
        return self.param_count.total

    @property
    def params_active(self) -> int:
        return self.param_count.active

    def params_per_device_by_group(self, tp: int, pp: int = 1, ep: int = 1) -> dict[str, int]:
        """Every weight group's parameters on the most loaded device (arch.params_per_device)."""
        return arch.params_per_device(self, tp, pp, ep)

    def kv_bytes_per_token_by_kind(self, tp: int = 1, dtype_bytes: int = 2) -> dict[str, int]:
        """KV bytes one token adds on one TP rank, per attention kind (full, sliding, mla)."""
        return {k: v * dtype_bytes for k, v in arch.kv_elements_per_token(self, tp).items()}

    @property
    def is_gqa(self) -> bool:
        return self.num_q_heads > self.num_kv_heads

    @property
    def q_dim(self) -> int:
        return self.num_q_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    def q_heads_per_worker(self, tp: int) -> int:
        return self.num_q_heads // tp

    def kv_heads_per_worker(self, tp: int) -> int:
        # KV heads are replicated when TP exceeds their count.
        return math.ceil(self.num_kv_heads / tp)

    def params_per_device(self, tp: int, pp: int) -> int:
        """Transformer-layer parameters on one device (embeddings, LM head, norms ignored)."""
        e, hd = self.embedding_dim, self.head_dim
        qkv = e * hd * (self.q_heads_per_worker(tp) + 2 * self.kv_heads_per_worker(tp))
        out = e * hd * self.q_heads_per_worker(tp)
        mlp = (3 if self.use_gated_mlp else 2) * e * self.mlp_hidden_dim // tp
        return (qkv + out + mlp) * (self.num_layers // pp)

    def embedding_params_per_device(self, tp: int, pp: int) -> int:
        """Input embedding and LM head parameters on the most loaded device (vocabulary-parallel
        over TP). With one stage both sit on every device, once if the weights are tied; with
        several stages the embedding is on the first and the head on the last."""
        one = -(-self.vocab_size // tp) * self.embedding_dim
        copies = 2 if pp == 1 and not self.tie_word_embeddings else 1
        return copies * one

    def check_parallelism(self, tp: int, pp: int) -> None:
        """Raise ConfigError unless TP divides the heads and PP divides the layers."""
        if tp < 1 or pp < 1:
            raise ConfigError(f"cluster.tp/pp: must be >= 1 (got tp={tp}, pp={pp})")
        if self.num_kv_heads > self.num_q_heads or self.num_q_heads % self.num_kv_heads:
            raise ConfigError(
                f"cluster.model: {self.name}'s {self.num_q_heads} query heads are not a "
                f"multiple of its {self.num_kv_heads} KV heads (each KV head serves a whole "
                "group of query heads)"
            )
        if self.num_q_heads % tp:
            raise ConfigError(
                f"cluster.tp: {tp} does not divide {self.name}'s {self.num_q_heads} query heads"
            )
        if self.num_layers % pp:
            raise ConfigError(
                f"cluster.pp: {pp} does not divide {self.name}'s {self.num_layers} layers"
            )


def list_models() -> list[str]:
    return list(load_catalog("models")) + list(load_catalog("hf_configs"))


def _embedded(full: str) -> ModelSpec:
    """A catalog entry: a ModelSpec JSON (models/) or an embedded config.json (hf_configs/)."""
    dense = load_catalog("models")
    if full in dense:
        return ModelSpec(**dense[full])
    from vidur_fast.catalog.hf_config import spec_from_hf

    entry = load_catalog("hf_configs")[full]
    return spec_from_hf(entry["config"], f"embedded config of {full}", full)


def _from_hf_config(path: Path) -> ModelSpec:
    from vidur_fast.catalog.hf_config import read_hf_config

    return read_hf_config(path)


def dense_from_hf(cfg: dict, path, name: str) -> ModelSpec:
    """The dense reading of a config.json (the fields every decoder states)."""
    try:
        e = int(cfg["hidden_size"])
        qh = int(cfg["num_attention_heads"])
        act = str(cfg.get("hidden_act", "silu"))
        arch = " ".join(cfg.get("architectures", []) or [])
        gated = "Phi" not in arch and "GPT" not in arch and act != "gelu_new"
        spec = ModelSpec(
            name=name,
            num_layers=int(cfg["num_hidden_layers"]),
            num_q_heads=qh,
            num_kv_heads=int(cfg.get("num_key_value_heads", qh)),
            embedding_dim=e,
            head_dim=int(cfg.get("head_dim") or e // qh),
            mlp_hidden_dim=int(cfg["intermediate_size"]),
            use_gated_mlp=gated,
            vocab_size=int(cfg.get("vocab_size", 32000)),
            max_position_embeddings=int(cfg.get("max_position_embeddings", 4096)),
            post_attn_norm=gated,
            norm="rms" if "rms_norm_eps" in cfg else "layer",
            activation=act,
            qkv_bias=bool(cfg.get("attention_bias", cfg.get("qkv_bias", False))),
            qk_norm="Qwen3" in arch,
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            rope_theta=float(cfg.get("rope_theta", 10000.0)),
        )
    except (KeyError, TypeError, ValueError, ZeroDivisionError, OverflowError) as exc:
        raise ConfigError(f"cluster.model: {path} lacks a usable field {exc}") from None
    for field in ("num_layers", "num_q_heads", "num_kv_heads", "embedding_dim", "head_dim",
                  "mlp_hidden_dim", "max_position_embeddings"):  # fmt: skip
        if getattr(spec, field) <= 0:
            raise ConfigError(
                f"cluster.model: {path}: {field} must be > 0 (got {getattr(spec, field)})"
            )
    return spec


def get_model(name: str) -> ModelSpec:
    """A catalog model by HF name (case-insensitive; the part after '/' also works) or a path
    to a Hugging Face config.json (or a directory holding one)."""
    path = Path(name)
    if name.endswith(".json") or path.is_dir():
        cfg = path / "config.json" if path.is_dir() else path
        return _from_hf_config(cfg)
    key = name.lower()
    for full in list_models():
        if key in (full.lower(), full.split("/")[-1].lower()):
            return _embedded(full)
    # a checkpoint name (fine-tuned, quantized): its catalog architecture, or a ConfigError
    # naming the closest catalog entries
    from vidur_fast.catalog.names import resolve_model_name

    return _embedded(resolve_model_name(name).catalog_name)
