"""What aiconfigurator's B200 tables say about Llama-3.1-70B's prefill and decode kernels.

Two checks behind docs/validation.md, "Blackwell prefill and NVFP4 decode: what was checked":

* GEMMs: the four linear layers of Llama-3.1-70B x 80 layers, per TP, timed from the B200
  GEMM tables of each serving framework in the installed package (vLLM, TensorRT-LLM,
  SGLang; the newest version of each, fastest-kernel envelope on, model shapes interpolated
  as the aiconfigurator source does), at a decode batch (m = 4) and one prefill (m = 8192).
* Context attention: one request's full prefill (isl 1024 and 8192, fp8 KV cache) x 80 layers
  with the model's heads per GPU, from every vLLM attention table version of B200 and from
  H200's, with the kernel that measured those rows.

Print only; no asserts.

    python bench/bench_blackwell_tables.py
"""

import numpy as np

from vidur_fast.catalog import get_device, get_model
from vidur_fast.timing.sources import aiconfigurator as aic
from vidur_fast.timing.sources._aic_data import get_system, newest_table, table_versions
from vidur_fast.timing.sources._aic_gemm import gemm_table, interpolate_gemm
from vidur_fast.timing.sources._common import interp_loglog, linear_shapes

MODEL = "meta-llama/Llama-3.1-70B"
TPS = (1, 2, 4, 8)
GEMM_M = (4, 8192)
FRAMEWORKS = ("vllm", "trtllm", "sglang")
ISLS = (1024, 8192)
CONTEXT_TABLE = "context_attention_perf.parquet"


def gemm_step_ms(path, dtype: str, tp: int) -> dict[int, float]:
    """{m: ms} of the model's linear layers (all layers) at each m of GEMM_M."""
    model = get_model(MODEL)
    table = gemm_table(path, dtype, envelope=True)
    total = np.zeros(len(table.m))
    for n, k in linear_shapes(model, tp).values():
        total += interpolate_gemm(table, n, k)
    return {m: float(np.interp(m, table.m, total)) * model.num_layers for m in GEMM_M}


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


def main() -> int:
    print_gemms()
    print_attention()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
