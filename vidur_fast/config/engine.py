"""The engine model each scheduler implies: settings left at None / "auto" get their values here.

The vllm_v1 scheduler stands for vLLM's engine as `vllm serve` runs it, so its defaults are the
validated settings of docs/validation.md: async scheduling (a scheduler field), vLLM's memory
accounting, the GPU time per step outside the per-layer model (sampling), the launch floor of
steps that run outside CUDA graphs, and the API server's front end. Vidur's schedulers keep
Vidur's semantics: no sampler term, no launch floor, Vidur's memory planner, no front end.
`simulate` resolves a config once, before validating it, so what `validate` simulates for a
benchmark row and what `simulate` runs for the same deployment are the same engine
(tests/validation/test_engine_defaults.py).
"""

from dataclasses import replace

from vidur_fast.config.sim import SimConfig, VllmV1Scheduler

# GPU time per step outside the per-layer kernel model, fixed and per request in the batch (ms).
# Derived on the calibration set (the 90 Qwen3-32B H100 rows, docs/validation.md "Engine step"):
# pairs of benchmarks that differ only in output length separate the decode step from prefill
# interference, and the decode step exceeds the kernel sum by 1.40-1.48 ms at 8 requests and
# 6.30-6.49 ms at 128, independent of TP. Those runs scheduled asynchronously (their TTFT shows
# the one-step-later join), which hides host time behind the GPU step, so the excess is GPU work
# that does not overlap: sampling with the model's generation config (top-k/top-p over the full
# vocabulary, replicated on every TP rank and growing with the batch), what a vLLM server does
# when the client sends no sampling parameters. Greedy requests (temperature 0) skip it.
VLLM_SAMPLER_MS = 1.42
VLLM_SAMPLER_PER_SEQ_MS = 0.040
# Host time to launch one layer's kernels in a step that runs outside CUDA graphs: vLLM replays
# graphs for decode batches and for mixed batches up to its largest captured size, and launches
# any larger step carrying a prompt chunk kernel by kernel, so that step lasts at least this much
# per layer. Calibrated on the calibration set (the value of lowest TTFT MAPE over 0 ... 0.7,
# docs/validation.md "Launch floor").
VLLM_EAGER_LAUNCH_MS_PER_LAYER = 0.45
# Largest batch (tokens) vLLM (>= 0.11) captures piecewise CUDA graphs for by default.
VLLM_GRAPH_MAX_TOKENS = 512
# The API server in front of the engine (any workload): serial request handling before the
# engine sees a request, and the latency of each streamed token to the client (typical
# magnitudes, not fitted; docs/validation.md "Host overheads").
VLLM_INGEST_MS = 2.0
VLLM_RESPONSE_MS = 1.0


def is_vllm_engine(cfg: SimConfig) -> bool:
    """Whether the config simulates vLLM's own engine (the vllm_v1 scheduler)."""
    return isinstance(cfg.scheduler, VllmV1Scheduler)


def memory_model(cfg: SimConfig) -> str:
    """The KV planner accounting the config asks for ("auto" resolved by the scheduler)."""
    mm = cfg.cluster.memory_model
    if mm == "auto":
        return "vllm" if is_vllm_engine(cfg) else "vidur"
    return mm


def resolve_engine(cfg: SimConfig) -> SimConfig:
    """cfg with every engine-default field (None / "auto") set to its scheduler's value."""
    vllm = is_vllm_engine(cfg)
    out = cfg
    if cfg.cluster.memory_model == "auto":
        out = replace(out, cluster=replace(cfg.cluster, memory_model=memory_model(cfg)))
    p = cfg.predictor
    if p.sampler_ms is None or p.sampler_per_seq_ms is None:
        out = replace(
            out,
            predictor=replace(
                p,
                sampler_ms=(VLLM_SAMPLER_MS if vllm else 0.0)
                if p.sampler_ms is None
                else p.sampler_ms,
                sampler_per_seq_ms=(VLLM_SAMPLER_PER_SEQ_MS if vllm else 0.0)
                if p.sampler_per_seq_ms is None
                else p.sampler_per_seq_ms,
            ),
        )
    p = out.predictor
    if p.eager_launch_ms_per_layer is None or p.graph_max_tokens is None:
        eager = VLLM_EAGER_LAUNCH_MS_PER_LAYER if vllm else 0.0
        graphs = VLLM_GRAPH_MAX_TOKENS if vllm else 0
        out = replace(
            out,
            predictor=replace(
                p,
                eager_launch_ms_per_layer=eager
                if p.eager_launch_ms_per_layer is None
                else p.eager_launch_ms_per_layer,
                graph_max_tokens=graphs if p.graph_max_tokens is None else p.graph_max_tokens,
            ),
        )
    w = cfg.workload
    if w.ingest_ms is None or w.response_ms is None:
        ingest = (VLLM_INGEST_MS if vllm else 0.0) if w.ingest_ms is None else w.ingest_ms
        resp = (VLLM_RESPONSE_MS if vllm else 0.0) if w.response_ms is None else w.response_ms
        out = replace(out, workload=replace(w, ingest_ms=ingest, response_ms=resp))
    return out
