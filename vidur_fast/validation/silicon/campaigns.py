"""What each measurement campaign of the silicon corpus ran: engine flags and client settings.

A campaign is recognised from its `silicon_data_source` text. Only settings that the
campaign's own published benchmark scripts state are recorded here (docs/validation.md,
"What the silicon corpus measured"); nothing is fitted to the measurements. A row whose
campaign is not recognised is simulated with the validator's defaults.
"""

import re
from dataclasses import dataclass

from vidur_fast.validation.silicon.sample import SiliconRow

# catalog devices of the Hopper generation (SM90)
HOPPER_DEVICES = ("h100", "h200")


@dataclass(frozen=True)
class Campaign:
    name: str
    """Short label used in reports."""
    pattern: str
    """Regular expression matched against the row's silicon_data_source and model."""
    description: str
    kv_cache_dtype: str = ""
    """KV-cache dtype the engine ran with ("" = the validator's default, the model dtype)."""
    length_range_ratio: float = 1.0
    """The client draws each prompt and output length uniformly from [ratio x L, L]
    (1.0 = fixed lengths)."""
    requests_per_client: int = 0
    """Requests sent per client (0 = the validator's default)."""
    prefix_caching: bool | None = None
    """Whether the engine ran with prefix caching (None = not stated)."""
    prompts_repeat: bool | None = None
    """Whether the client reuses a small pool of prompts (so cached prefixes hit)."""
    async_scheduling: bool | None = None
    """The engine ran with `--async-scheduling` (True) or without it (False); None = not
    stated (vLLM's default for the row's version)."""
    greedy: bool = False
    """The client sends temperature 0 with every request, so the engine samples by argmax:
    no sampler time per step (predictor.sampler_ms and sampler_per_seq_ms are 0)."""
    hopper_decode_attention_kv_dtype: str = ""
    """On Hopper GPUs, time decode attention with the kernels measured at this KV dtype
    ("" = the cache's own): the campaign's vLLM release gains nothing in decode from an fp8
    cache on SM90 (docs/validation.md, "Decode attention with an fp8 cache on Hopper")."""
    mixed_graph_tokens_per_client: int = 0
    """The servers captured piecewise CUDA graphs (which mixed batches replay) up to this many
    tokens per client (vLLM 0.10: 2 x max_num_seqs, capped at 512; the campaign set
    max_num_seqs to the client count); 0 = the validator's default."""
    no_mixed_graph_devices: tuple[str, ...] = ()
    """Devices whose servers captured no graph for mixed batches (cudagraph_mode
    FULL_DECODE_ONLY)."""
    allreduce_rms_fusion_devices: tuple[str, ...] = ()
    """Devices whose servers fused each TP all-reduce with the residual add and RMSNorm after
    it (`enable_fi_allreduce_fusion` in the compilation config's pass_config; applied as
    predictor.allreduce_rms_fusion)."""
    gpu_memory_utilization: float = 0.0
    """The servers' `--gpu-memory-utilization` (the engine's share of each GPU's memory;
    0 = not stated: the validator's memory_margin_fraction)."""
    held_out: str = ""
    """Why the rows cannot be reproduced as measured ("" = they can): with campaign facts on
    (and no prompt-pool what-if) they are listed as not simulated with this reason."""
    modes: tuple[str, ...] = ()
    """Only rows of these serving modes (agg, disagg; () = every mode)."""


CAMPAIGNS: tuple[Campaign, ...] = (
    Campaign(
        name="inferencex",
        pattern=r"source_file=\d{4}-\d{2}-\d{2}\.csv; model=Llama-3\.1-70B",
        description=(
            "public InferenceMAX/InferenceX sweep (Llama-3.3-70B-Instruct FP8/FP4 checkpoints, "
            "vllm/vllm-openai image): vllm serve --kv-cache-dtype fp8 --async-scheduling "
            "--no-enable-prefix-caching --max-num-batched-tokens 8192 --max-num-seqs CONC; "
            "client benchmark_serving.py --dataset-name random --random-range-ratio 0.8 "
            "--num-prompts 10*CONC --max-concurrency CONC --ignore-eos"
        ),
        kv_cache_dtype="fp8",
        length_range_ratio=0.8,
        requests_per_client=10,
        prefix_caching=False,
        prompts_repeat=False,
        async_scheduling=True,
        # benchmark_serving.py's OpenAI request functions send "temperature": 0.0
        greedy=True,
        hopper_decode_attention_kv_dtype="bf16",
        mixed_graph_tokens_per_client=2,
        no_mixed_graph_devices=("b200",),
        # the B200 scripts' compilation config: "enable_fi_allreduce_fusion": true
        allreduce_rms_fusion_devices=("b200",),
    ),
    Campaign(
        name="dynamo-gtl-disagg",
        pattern=r"image=nvcr\.io/nvidia/ai-dynamo/vllm-runtime",
        modes=("disagg",),
        description=(
            "NVIDIA Dynamo vllm-runtime 0.8.0 container (vLLM 0.12.0), disaggregated: prefill "
            "and decode workers behind the Dynamo frontend, KV moved by NIXL; client "
            "concurrency not recorded"
        ),
        held_out=(
            "client concurrency not recorded (the id's concurrency field is empty; the "
            "corpus's decode_batch_size x decode workers is the operating point aiconfigurator "
            "estimates, not a stated client count)"
        ),
    ),
    Campaign(
        name="dynamo-gtl",
        pattern=r"image=nvcr\.io/nvidia/ai-dynamo/vllm-runtime",
        description=(
            "NVIDIA Dynamo vllm-runtime container (vLLM 0.12.0 inside Dynamo 0.8.0), "
            "Dynamo frontend; client concurrency not recorded"
        ),
        held_out=(
            "client concurrency not recorded (batch_size is not the client count: TPOT at TP 1 "
            "and 2 is below the weight + bf16-KV read floor of that many sequences)"
        ),
    ),
    Campaign(
        name="gap-analysis-reuse",
        pattern=r"aic-auto-gap-analysis.*; model=nvidia/Llama-3\.1-8B-Instruct-FP8$",
        description=(
            "aiconfigurator gap-analysis sweep of nvidia/Llama-3.1-8B-Instruct-FP8 on H200, "
            "vLLM 0.12.0; load generator not published; the measured throughput implies "
            "prompts served from the prefix cache"
        ),
        prefix_caching=True,
        prompts_repeat=True,
        held_out=(
            "prompts served from the prefix cache (6 of 21 rows need more prefill-GEMM time "
            "per second than a second holds; TPOT at osl 100 shows no prefill stalls); the "
            "campaign's prompt pool or hit rate is not recorded"
        ),
    ),
    Campaign(
        name="gap-analysis",
        pattern=r"aic-auto-gap-analysis",
        description=(
            "aiconfigurator gap-analysis sweeps, vLLM 0.12.0, client concurrency recorded per "
            "row; engine flags and load generator not published"
        ),
    ),
)


def campaign_for(row: SiliconRow) -> Campaign | None:
    text = f"{row.source}; model={row.bench.model}"
    for c in CAMPAIGNS:
        if c.modes and row.bench.mode not in c.modes:
            continue
        if re.search(c.pattern, text):
            return c
    return None


def client_lengths(isl: int, osl: int, n: int, ratio: float, seed: int):
    """Per-request (prompt, output) lengths of a client drawing each uniformly from
    [int(ratio x L), L], as `benchmark_serving.py --dataset-name random` does."""
    import numpy as np

    rng = np.random.default_rng(seed)
    p = rng.integers(int(isl * ratio), isl, size=n, endpoint=True)
    d = rng.integers(max(int(osl * ratio), 2), max(osl, 2), size=n, endpoint=True)
    return p, d
