"""What aiconfigurator's B200 tables say about Llama-3.1-70B's prefill and decode kernels.

Two checks behind docs/validation.md, "Blackwell prefill and NVFP4 decode: what was checked":

* GEMMs: the four linear layers of Llama-3.1-70B x 80 layers, per TP, timed from the B200
  GEMM tables of each serving framework in the installed package (vLLM, TensorRT-LLM,
  SGLang; the newest version of each, fastest-kernel envelope on, model shapes interpolated
  as the aiconfigurator source does), at a decode batch (m = 4) and one prefill (m = 8192).
* NVFP4 GEMMs at decode sizes: the kernel each framework's NVFP4 table recorded, the linear
  layers per step at m = 1..512 per TP and the difference from vLLM's table, and each linear
  layer at m = 128 on one GPU (the shapes of vLLM's NVFP4 backend comparison,
  vllm-project/vllm#22346, quoted in docs/validation.md).
* Context attention: one request's full prefill (isl 1024 and 8192, fp8 KV cache) x 80 layers
  with the model's heads per GPU, from every vLLM attention table version of B200 and from
  H200's, with the kernel that measured those rows.
* Power: which H100 / H200 / B200 tables carry the GPU power drawn while each kernel was
  timed, and, for the one kernel timed in two B200 vLLM versions with and without it (the
  Triton fused MoE, vLLM 0.22.0 with power against 0.19.0 without), the latency ratio per
  measured power and, for the rows timed at the 1,000 W limit, per throughput.

Print only; no asserts.

    python bench/bench_blackwell_tables.py
"""

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from vidur_fast.catalog import get_device, get_model
from vidur_fast.timing.sources import aiconfigurator as aic
from vidur_fast.timing.sources._aic_data import get_system, newest_table, table_versions
from vidur_fast.timing.sources._aic_gemm import gemm_table, interpolate_gemm
from vidur_fast.timing.sources._common import interp_loglog, linear_shapes

MODEL = "meta-llama/Llama-3.1-70B"
TPS = (1, 2, 4, 8)
GEMM_M = (4, 8192)
DECODE_M = (1, 4, 16, 64, 128, 256, 512)
FRAMEWORKS = ("vllm", "trtllm", "sglang")
ISLS = (1024, 8192)
CONTEXT_TABLE = "context_attention_perf.parquet"
POWER_DEVICES = ("h100", "h200", "b200")
MOE_KEYS = [
    "kernel_source",
    "moe_dtype",
    "num_tokens",
    "hidden_size",
    "inter_size",
    "topk",
    "num_experts",
    "moe_tp_size",
    "moe_ep_size",
    "distribution",
]
POWER_BINS = [0, 600, 800, 900, 950, 975, 1000, 1100]
TFLOPS_BINS = [0, 200, 400, 800, 1300, 1700]
LATENCY_BINS = [0, 0.5, 1, 2, 5, 50]


def gemm_step_ms(path, dtype: str, tp: int, ms=GEMM_M) -> dict[int, float]:
    """{m: ms} of the model's linear layers (all layers) at each m of ms."""
    model = get_model(MODEL)
    table = gemm_table(path, dtype, envelope=True)
    total = np.zeros(len(table.m))
    for n, k in linear_shapes(model, tp).values():
        total += interpolate_gemm(table, n, k)
    return {m: float(np.interp(m, table.m, total)) * model.num_layers for m in ms}


def layer_gemm_us(path, dtype: str, tp: int, m: int) -> dict[str, float]:
    """{linear layer: us} of one layer's GEMMs at m tokens (measured cells, no envelope)."""
    table = gemm_table(path, dtype, envelope=False)
    return {
        name: float(np.interp(m, table.m, interpolate_gemm(table, n, k))) * 1e3
        for name, (n, k) in linear_shapes(get_model(MODEL), tp).items()
    }


def kernel_sources(path, dtype: str) -> list[str]:
    """The kernel names a GEMM table recorded for one gemm_dtype."""
    df = pd.read_parquet(path, columns=["gemm_dtype", "kernel_source"])
    return sorted(df[df.gemm_dtype == dtype].kernel_source.unique())


def print_gemms() -> None:
    system = get_system(get_device("b200").aiconfigurator_system)
    tables = {fw: newest_table(system, "gemm", fw, "gemm_perf.parquet") for fw in FRAMEWORKS}
    heads = [f"{fw} {version}" for fw, (version, _) in tables.items()]
    print(f"{MODEL} on B200: linear layers per step (ms) in each framework's GEMM table")
    print(f"{'dtype':6s} {'tp':>3s} {'m':>5s}  " + "  ".join(f"{h:>18s}" for h in heads))
    for dtype in ("fp8", "nvfp4"):
        for tp in TPS:
            steps = [gemm_step_ms(path, dtype, tp) for _, path in tables.values()]
            for m in GEMM_M:
                row = "  ".join(f"{s[m]:18.2f}" for s in steps)
                print(f"{dtype:6s} {tp:3d} {m:5d}  {row}")


def print_nvfp4_decode() -> None:
    system = get_system(get_device("b200").aiconfigurator_system)
    tables = {fw: newest_table(system, "gemm", fw, "gemm_perf.parquet") for fw in FRAMEWORKS}
    print(f"\n{MODEL} on B200: NVFP4 linear layers per decode step (ms, envelope)")
    for fw, (version, path) in tables.items():
        print(f"  {fw} {version}: kernel_source {', '.join(kernel_sources(path, 'nvfp4'))}")
    print(f"{'tp':>3s} {'table':18s} " + " ".join(f"m={m:<6d}" for m in DECODE_M))
    for tp in TPS:
        steps = {fw: gemm_step_ms(path, "nvfp4", tp, DECODE_M) for fw, (_, path) in tables.items()}
        for fw, step in steps.items():
            if fw == "vllm":
                print(f"{tp:3d} {fw:18s} " + " ".join(f"{step[m]:8.2f}" for m in DECODE_M))
                continue
            diff = [step[m] - steps["vllm"][m] for m in DECODE_M]
            print(f"{tp:3d} {fw + ' - vllm':18s} " + " ".join(f"{d:+8.2f}" for d in diff))
    print("one layer's NVFP4 GEMMs at m = 128, TP 1 (us, measured cells):")
    for fw, (_, path) in tables.items():
        us = layer_gemm_us(path, "nvfp4", 1, 128)
        print(f"  {fw:6s} " + "  ".join(f"{k} {v:.1f}" for k, v in us.items()))


def print_attention() -> None:
    model = get_model(MODEL)
    print(f"\n{MODEL}: one request's context attention, fp8 KV cache, all layers (ms)")
    for device in ("b200", "h200"):
        system = get_system(get_device(device).aiconfigurator_system)
        for version in table_versions(system, "attention", "vllm", CONTEXT_TABLE):
            path = system.data_dir / "attention" / "vllm" / version / CONTEXT_TABLE
            rows = aic.attention_rows(path, True, "fp8")
            cells, kernels = [], set()
            for tp in TPS:
                q, kv = model.q_heads_per_worker(tp), model.kv_heads_per_worker(tp)
                match = aic.match_heads(rows, q, kv, model.head_dim)
                heads = (rows.num_heads == match.q) & (rows.num_key_value_heads == match.kv)
                kernels |= set(rows.kernel_source[heads & (rows.isl > 1)])
                isl, t = aic.full_prefill_curve(rows, match)
                ms = interp_loglog(np.array(ISLS), isl, t, above_exponent=2.0) * model.num_layers
                cells.append(f"tp{tp} " + "/".join(f"{x:.1f}" for x in ms))
            names = ",".join(sorted(kernels))
            print(f"{device} vllm {version:7s} {names:30s} isl {ISLS}: " + "  ".join(cells))


def tables_with_power(device: str) -> list[str]:
    """Parquet tables of the device with a `power` column (paths below its data directory)."""
    root = get_system(get_device(device).aiconfigurator_system).data_dir
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*.parquet")
        if "power" in pq.read_schema(p).names
    )


def fused_moe_pairs() -> pd.DataFrame:
    """B200 Triton fused-MoE rows timed in vLLM 0.22.0 (with power) and 0.19.0 (without)."""
    moe = get_system(get_device("b200").aiconfigurator_system).data_dir / "moe" / "vllm"
    cols = MOE_KEYS + ["latency"]
    new = pd.read_parquet(moe / "0.22.0" / "moe_perf.parquet", columns=cols + ["power"])
    old = pd.read_parquet(moe / "0.19.0" / "moe_perf.parquet", columns=cols)
    pairs = new.merge(old, on=MOE_KEYS, suffixes=("", "_short"))
    pairs = pairs[pairs.kernel_source == "vllm_fused_moe"].copy()
    pairs["ratio"] = pairs.latency / pairs.latency_short
    # nominal FLOPs: gate/up (h -> 2i) and down (i -> h) per routed token, sharded by TP x EP
    flops = 6.0 * pairs.num_tokens * pairs.topk * pairs.hidden_size * pairs.inter_size
    per_gpu = flops / (pairs.moe_tp_size * pairs.moe_ep_size)
    pairs["tflops_short"] = per_gpu / pairs.latency_short / 1e9
    return pairs


def print_ratio_medians(rows: pd.DataFrame, bins: pd.Series) -> None:
    """One line per MoE dtype: the latency ratio's median (and row count) in each bin."""
    for dtype, g in rows.groupby("moe_dtype"):
        med = g.groupby(bins[g.index], observed=True).ratio.agg(["median", "size"])
        print(
            f"  {dtype:9s} "
            + "  ".join(f"{b}: {r['median']:.3f} ({int(r['size'])})" for b, r in med.iterrows())
        )


def print_power() -> None:
    print("\nTables timed with the GPU power recorded:")
    for device in POWER_DEVICES:
        print(f"  {device}: " + (", ".join(tables_with_power(device)) or "none"))
    pairs = fused_moe_pairs()
    big = pairs[pairs.num_tokens >= 1024]
    print(
        "\nB200 vllm_fused_moe, >= 1024 tokens: latency vLLM 0.22.0 (>= 1 s timed, power)"
        " / 0.19.0, median (rows) per power (W)"
    )
    print_ratio_medians(big, pd.cut(big.power, POWER_BINS))
    cap = big[(big.power >= 975) & (big.latency >= 0.2)]
    print(
        "rows at 975-1000 W (latency >= 0.2 ms): ratio median per throughput of the short"
        " timing (TFLOP/s)"
    )
    print_ratio_medians(cap, pd.cut(cap.tflops_short, TFLOPS_BINS))

    print(
        "bf16 and fp8 rows at 975-1000 W and below 900 W: ratio median per latency of the short"
        " timing (ms)"
    )
    per_tensor = big[big.moe_dtype != "fp8_block"]
    for name, g in (
        ("975-1000 W", per_tensor[per_tensor.power >= 975]),
        ("< 900 W", per_tensor[per_tensor.power < 900]),
    ):
        med = g.groupby(pd.cut(g.latency_short, LATENCY_BINS), observed=True).ratio.agg(
            ["median", "size"]
        )
        print(
            f"  {name:10s} "
            + "  ".join(f"{b}: {r['median']:.3f} ({int(r['size'])})" for b, r in med.iterrows())
        )


def main() -> int:
    print_gemms()
    print_nvfp4_decode()
    print_attention()
    print_power()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
