"""What the MoE campaigns of the silicon corpus ran (the MoE counterpart of campaigns.py).

The gpt-oss-120b, MiniMax-M2.5 and Kimi-K2.5 rows on H100 / H200 come from the public
InferenceMAX / InferenceX sweep (the same `source_file=<date>.csv; model=...` records and
isl/osl grid 1024/1024, 1024/8192, 8192/1024 as its Llama-70B rows, `vllm/vllm-openai`
images 0.16-0.18) or from a dump of the same sweep's database (`db-dump/...; config_id=...`,
same grid and images; the `kimi-k2.5-gap-analysis.csv` rows repeat 15 of its Kimi-K2.5 rows
value for value). What its published scripts state: the shared client
(`benchmark_serving.py --dataset-name random --random-range-ratio 0.8 --num-prompts
10*CONC --max-concurrency CONC --ignore-eos`); the gpt-oss servers run `vllm serve` with
`no-enable-prefix-caching`, `max-num-batched-tokens 8192` and `--max-num-seqs CONC`, no
KV-cache dtype flag (so the model's bf16 cache), `max-cudagraph-capture-size 2048`, and no
`--async-scheduling` flag, which vLLM
turns on by default from 0.12 on, and the client samples greedily (no sampler terms), as for
the campaign facts of the Llama-70B rows. Nothing here is fitted to the measurements.
"""

import re
from dataclasses import dataclass

from vidur_fast.validation.silicon.campaigns import Campaign
from vidur_fast.validation.silicon.sample import SiliconRow, is_moe


@dataclass(frozen=True)
class MoECampaign(Campaign):
    moe_kernel: str = ""
    """The MoE kernel family the campaign's servers ran (predictor.moe_kernel; "" = the
    fastest measured)."""
    systems: tuple[str, ...] = ()
    """Only rows of these systems (() = all)."""
    models: tuple[str, ...] = ()
    """Only rows of these models (() = all)."""
    graph_capture_max_tokens: int = 0
    """The servers set `max-cudagraph-capture-size` to this many tokens, so mixed batches up to
    it replay piecewise CUDA graphs (predictor.graph_max_tokens; 0 = not stated)."""
    allreduce_rms_fusion: bool = False
    """The servers pass `fuse_allreduce_rms: true` in their compilation config's pass_config
    (predictor.allreduce_rms_fusion; False = not stated)."""
    expert_parallel: bool = False
    """The servers pass `--enable-expert-parallel` whatever the row's moe columns say: each
    expert whole on one of the tp x attention-dp GPUs (moe_ep = tp x dp, moe_tp 1)."""
    layout_from_id: bool = False
    """The sweep's config and script ran the layout the row's id states (tp{N}_ep{M}: N GPUs,
    experts over M, no attention DP) where the columns state another (sample.SiliconRow
    label_conflict): such rows are simulated with the id's layout instead of skipped."""


# What every InferenceX MoE server and client of the sweep ran: benchmark_serving.py drawing
# lengths from [0.8 L, L], 10 requests per client, greedy requests (its OpenAI request functions
# send "temperature": 0.0); no prefix caching; async scheduling, vLLM's default from 0.12 on.
INFERENCEX_CLIENT = dict(
    length_range_ratio=0.8,
    requests_per_client=10,
    prefix_caching=False,
    prompts_repeat=False,
    async_scheduling=True,
    greedy=True,
)

# The sweep's MiniMax-M2.5 rows (its two record formats), and what every H200 script of the
# rows' dates passed besides the client settings: --gpu-memory-utilization 0.95. (The scripts
# left vLLM's prefix cache on until 2026-03-28; the random prompts share no prefix, and the
# group's simulated TTFT and TPOT errors are the same with it on.)
MINIMAX_ROWS = (
    r"(db-dump/\d{4}-\d{2}-\d{2}; config_id=\d+|"
    r"source_file=\d{4}-\d{2}-\d{2}\.csv; model=MiniMax[^;]*); "
)
MINIMAX_H200 = dict(
    **INFERENCEX_CLIENT,
    gpu_memory_utilization=0.95,
    systems=("h200_sxm",),
    models=("MiniMaxAI/MiniMax-M2.5",),
)

MOE_CAMPAIGNS: tuple[Campaign, ...] = (
    Campaign(
        name="inferencex-moe-c512",
        pattern=r"source_file=\d{4}-\d{2}-\d{2}\.csv; model=GPT-OSS-120B; silicon_concurrency=512",
        description="gpt-oss-120b runs at 512 clients filed with the InferenceX sweep",
        held_out=(
            "512 clients: the only rows of the sweep above 128 clients, recorded with vLLM "
            "0.11.2 or no image; a TTFT of 20-460 s beside a TPOT of 3.6-27 ms is not a closed "
            "loop of 512 clients on a server that admits 512 sequences (--max-num-seqs CONC), "
            "and these runs' server settings are not published"
        ),
    ),
    MoECampaign(
        name="inferencex-gpt-oss-hopper-v0.10",
        # measured before the sweep's 2025-11-04 move to vLLM 0.11 (no image recorded)
        pattern=(
            r"source_file=\d{4}-\d{2}-\d{2}\.csv; model=GPT-OSS-120B; silicon_concurrency=\d+; "
            r"measured=2025-(0\d|10|11-0[1-3])"
        ),
        description=(
            "public InferenceMAX sweep of 2025-11-02, gpt-oss-120b (vllm/vllm-openai 0.10.2, no "
            "VLLM_MXFP4_USE_MARLIN, so vLLM's Triton MXFP4 experts; async-scheduling, "
            "cuda-graph-sizes 2048, no prefix caching, bf16 KV cache); client "
            "benchmark_serving.py --random-range-ratio 0.8 --num-prompts 10*CONC"
        ),
        **INFERENCEX_CLIENT,
        # without VLLM_MXFP4_USE_MARLIN vLLM's Hopper MXFP4 backend is the OpenAI Triton kernel
        moe_kernel="oaitritonmxfp4",
        # config.yaml: cuda-graph-sizes 2048 (captures up to 2048 tokens)
        graph_capture_max_tokens=2048,
        systems=("h100_sxm", "h200_sxm"),
    ),
    MoECampaign(
        name="inferencex-gpt-oss-hopper",
        pattern=(r"source_file=\d{4}-\d{2}-\d{2}\.csv; model=GPT-OSS"),
        description=(
            "public InferenceMAX/InferenceX sweep, gpt-oss-120b (vllm/vllm-openai 0.18, "
            "VLLM_MXFP4_USE_MARLIN=1, async scheduling on by default, no prefix caching, bf16 "
            "KV cache); client benchmark_serving.py --random-range-ratio 0.8 --num-prompts "
            "10*CONC"
        ),
        **INFERENCEX_CLIENT,
        moe_kernel="marlin",
        # the scripts' config.yaml: max-cudagraph-capture-size 2048
        graph_capture_max_tokens=2048,
        systems=("h100_sxm", "h200_sxm"),  # vLLM refuses the Marlin MXFP4 path on Blackwell
    ),
    MoECampaign(
        name="inferencex-kimi",
        pattern=(
            r"(source_file=\d{4}-\d{2}-\d{2}\.csv; model=Kimi|"
            r"db-dump/\d{4}-\d{2}-\d{2}; config_id=.*vllm/vllm-openai|"
            r"source_file=kimi-k2\.5-gap-analysis\.csv)"
        ),
        description=(
            "public InferenceMAX/InferenceX sweep, Kimi-K2.5 int4 (vllm/vllm-openai 0.16, "
            "--max-num-seqs CONC, --gpu-memory-utilization 0.95, fuse_allreduce_rms, async "
            "scheduling on by default, no prefix caching, bf16 KV cache); client "
            "benchmark_serving.py --random-range-ratio 0.8 --num-prompts 10*CONC"
        ),
        **INFERENCEX_CLIENT,
        # benchmarks/single_node/kimik2.5_int4_h200.sh from its first version (2026-03-02)
        gpu_memory_utilization=0.95,
        # --max-num-seqs CONC: vLLM >= 0.11 captures graphs up to min(2 x max_num_seqs, 512)
        mixed_graph_tokens_per_client=2,
        # --compilation-config '{"pass_config": {"fuse_allreduce_rms": true}, ...}'
        allreduce_rms_fusion=True,
        models=("moonshotai/Kimi-K2.5",),
    ),
    MoECampaign(
        name="inferencex-minimax-h200-ep",
        # the sweep's H200 MiniMax-M2.5 runs from 2026-03-13 on (TP 8): the script of that
        # date (benchmarks/single_node/minimaxm2.5_fp8_h200.sh, "enable ep", "fix ep
        # condition") passes --enable-expert-parallel when EP_SIZE >= 1, and the workflow
        # passes the config's ep, 1 when the config names none: always on. The corpus records
        # that ep (1); vLLM could not have run the rows' moe_tp 8 (an expert's 1536 columns
        # over 8 GPUs leave 192 per GPU, not a multiple of the FP8 checkpoint's 128-column
        # blocks, which vLLM refuses).
        pattern=MINIMAX_ROWS
        + r"silicon_concurrency=\d+; measured=2026-(03-(1[3-9]|[23]\d)|(0[4-9]|1[0-2])-\d{2})",
        description=(
            "public InferenceX sweep, MiniMax-M2.5 FP8 on H200 from 2026-03-13 (vllm/vllm-openai "
            "0.16-0.18, --enable-expert-parallel, --gpu-memory-utilization 0.95, async "
            "scheduling on by default, bf16 KV cache); client benchmark_serving.py "
            "--random-range-ratio 0.8 --num-prompts 10*CONC"
        ),
        **MINIMAX_H200,
        expert_parallel=True,
    ),
    MoECampaign(
        name="inferencex-minimax-h200",
        # the first H200 MiniMax-M2.5 script (2026-03-01): vllm serve with TP, the memory
        # share and --max-model-len; no expert parallelism yet
        pattern=MINIMAX_ROWS,
        description=(
            "public InferenceX sweep, MiniMax-M2.5 FP8 on H200 before 2026-03-13 "
            "(vllm/vllm-openai 0.16, --gpu-memory-utilization 0.95, async scheduling on by "
            "default, bf16 KV cache); client benchmark_serving.py --random-range-ratio 0.8 "
            "--num-prompts 10*CONC"
        ),
        **MINIMAX_H200,
    ),
    MoECampaign(
        name="inferencex-minimax-h100",
        # .github/configs/nvidia-master.yaml, minimaxm2.5-fp8-h100-vllm (2026-03-27): search
        # space {tp: 4, ep: 4}, no dp-attn; benchmarks/single_node/minimaxm2.5_fp8_h100.sh
        # runs vllm serve --tensor-parallel-size $TP with --enable-expert-parallel when
        # EP_SIZE > 1 and no data parallelism: 4 GPUs. The sweep's 2026-04-06 file states
        # attention DP 4 x moe_ep 16 for its copies of these runs (its ids say tp4_ep4).
        pattern=MINIMAX_ROWS,
        description=(
            "public InferenceX sweep, MiniMax-M2.5 FP8 on H100 (vllm/vllm-openai 0.18, TP 4 "
            "with --enable-expert-parallel on 4 GPUs, --max-num-seqs 256, cudagraph_mode "
            "PIECEWISE, async scheduling on by default, no prefix caching, bf16 KV cache); "
            "client benchmark_serving.py --random-range-ratio 0.8 --num-prompts 10*CONC"
        ),
        **INFERENCEX_CLIENT,
        layout_from_id=True,
        systems=("h100_sxm",),
        models=("MiniMaxAI/MiniMax-M2.5",),
    ),
    Campaign(
        name="inferencex-moe",
        pattern=(
            r"(source_file=\d{4}-\d{2}-\d{2}\.csv; model=(GPT-OSS|MiniMax|Kimi)|"
            r"db-dump/\d{4}-\d{2}-\d{2}; config_id=.*vllm/vllm-openai|"
            # its 15 measurements repeat the sweep's 2026-04-06 Kimi-K2.5 H200 rows exactly
            r"source_file=kimi-k2\.5-gap-analysis\.csv)"
        ),
        description=(
            "public InferenceMAX/InferenceX sweep of MoE models (vllm/vllm-openai 0.16-0.18, "
            "async scheduling on by default, no prefix caching, bf16 KV cache); client "
            "benchmark_serving.py --random-range-ratio 0.8 --num-prompts 10*CONC"
        ),
        **INFERENCEX_CLIENT,
    ),
)


def moe_campaign_for(row: SiliconRow) -> Campaign | None:
    """The MoE campaign of a MoE row (None for dense rows and unrecognised campaigns)."""
    if not is_moe(row.bench.model):
        return None
    for c in MOE_CAMPAIGNS:
        if getattr(c, "systems", ()) and row.bench.device not in c.systems:
            continue
        if getattr(c, "models", ()) and row.bench.model not in c.models:
            continue
        if re.search(c.pattern, row.source):
            return c
    return None
