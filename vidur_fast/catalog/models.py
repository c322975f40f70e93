"""Model architecture catalog: shipped JSON entries or a local Hugging Face config.json."""

import json
import math
from dataclasses import dataclass
from pathlib import Path

from vidur_fast.catalog._load import load_catalog
from vidur_fast.errors import ConfigError


@dataclass(frozen=True)
class ModelSpec:
    """Dense decoder-only transformer shape (what the timing and memory models need)."""

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
    return list(load_catalog("models"))


def _from_hf_config(path: Path) -> ModelSpec:
    try:
        cfg = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"cluster.model: cannot read Hugging Face config {path}: {exc}") from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"cluster.model: {path} must hold a JSON object (a HF config.json)")
    try:
        e = int(cfg["hidden_size"])
        qh = int(cfg["num_attention_heads"])
        act = str(cfg.get("hidden_act", "silu"))
        arch = " ".join(cfg.get("architectures", []) or [])
        gated = "Phi" not in arch and "GPT" not in arch and act != "gelu_new"
        spec = ModelSpec(
            name=str(cfg.get("_name_or_path") or path.resolve().parent.name or path),
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
    cat = load_catalog("models")
    key = name.lower()
    for full, data in cat.items():
        if key in (full.lower(), full.split("/")[-1].lower()):
            return ModelSpec(**data)
    # a checkpoint name (fine-tuned, quantized): its catalog architecture, or a ConfigError
    # naming the closest catalog entries
    from vidur_fast.catalog.names import resolve_model_name

    return ModelSpec(**cat[resolve_model_name(name).catalog_name])
