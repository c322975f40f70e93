"""How far the analytic roofline source lands from aiconfigurator's measurements.

For H100, H200 and A100 and the Llama-3-8B and Qwen3-32B layer shapes (TP 1 and 2), the
roofline is evaluated at the exact points the database measured: GEMMs of the model's linear
layers at every measured m (model shapes interpolated as the aiconfigurator source does),
single-request context attention at every measured isl, and decode attention at every measured
(batch, kv). Prints MAPE and the median roofline/measured ratio per device and op family, then
the hold-out error of the GEMM shape interpolation. Print only; no asserts.

    .venv/bin/python bench/bench_roofline_error.py
"""

import numpy as np

from vidur_fast.catalog import get_device, get_model
from vidur_fast.timing.sources import aiconfigurator as aic
from vidur_fast.timing.sources import roofline as rl
from vidur_fast.timing.sources._aic_data import get_system, newest_table
from vidur_fast.timing.sources._aic_gemm import gemm_holdout_errors, gemm_table, interpolate_gemm
from vidur_fast.timing.sources._common import linear_shapes

DEVICES = ("h100", "h200", "a100")
MODELS = ("meta-llama/Meta-Llama-3-8B", "Qwen/Qwen3-32B")
TPS = (1, 2)


def measured_points(device: str, model_name: str, tp: int):
    """{family: (measured ms, roofline ms)} at the database's measured points."""
    dev, model = get_device(device), get_model(model_name)
    system = get_system(dev.aiconfigurator_system)
    rf = rl.Roofline.of(dev)
    q, kvh, d = model.q_heads_per_worker(tp), model.kv_heads_per_worker(tp), model.head_dim
    out = {}

    _, gemm_path = newest_table(system, "gemm", "vllm", "gemm_perf.parquet")
    table = gemm_table(gemm_path, "bfloat16", envelope=False)
    meas, roof = [], []
    for n, k in linear_shapes(model, tp).values():
        t = interpolate_gemm(table, n, k)
        ok = np.isfinite(t)
        meas.append(t[ok])
        roof.append(rl.gemm_ms(rf, table.m[ok], n, k))
    out["gemm"] = (np.concatenate(meas), np.concatenate(roof))

    _, ctx_path = newest_table(system, "attention", "vllm", "context_attention_perf.parquet")
    ctx = aic.attention_rows(ctx_path, context=True)
    match = aic.match_heads(ctx, q, kvh, d)
    sel = aic.select_heads(ctx, match, ["isl"])
    meas = aic.scale_above_floor(sel.latency.to_numpy(), match.prefill_scale)
    out["context_attn"] = (meas, rl.prefill_ms(rf, 0, sel.isl.to_numpy(), q, kvh, d))

    gen = aic.attention_rows(ctx_path.with_name("generation_attention_perf.parquet"), False)
    match = aic.match_heads(gen, q, kvh, d)
    sel = aic.select_heads(gen, match, ["batch_size", "step"])
    meas = aic.scale_above_floor(sel.latency.to_numpy(), match.decode_scale)
    roof = rl.decode_ms(rf, sel.batch_size.to_numpy(), sel.step.to_numpy(), q, kvh, d)
    out["decode_attn"] = (meas, roof)
    return out


def main() -> None:
    print("roofline vs aiconfigurator (vllm backend, bf16), models:", ", ".join(MODELS))
    print(f"{'device':<8}{'family':<14}{'points':>8}{'MAPE %':>9}{'median roof/meas':>18}")
    for device in DEVICES:
        pooled: dict[str, list] = {}
        for model in MODELS:
            for tp in TPS:
                for fam, (m, r) in measured_points(device, model, tp).items():
                    pooled.setdefault(fam, []).append((m, r))
        for fam, parts in pooled.items():
            m = np.concatenate([p[0] for p in parts])
            r = np.concatenate([p[1] for p in parts])
            mape = np.mean(np.abs(r - m) / m) * 100
            print(f"{device:<8}{fam:<14}{len(m):>8}{mape:>9.1f}{np.median(r / m):>18.2f}")

    print("\nGEMM (n, k) interpolation, one measured n or k held out (all m and other dims)")
    print(f"{'system':<10}{'held out':<12}{'points':>8}{'median |err| %':>16}{'p90 %':>8}")
    for device in DEVICES:
        system = get_system(get_device(device).aiconfigurator_system)
        _, path = newest_table(system, "gemm", "vllm", "gemm_perf.parquet")
        table = gemm_table(path, "bfloat16", envelope=False)
        for dim, value in (("n", 3072), ("n", 12288), ("n", 16384), ("k", 5120), ("k", 12288)):
            err = np.abs(gemm_holdout_errors(table, **{dim: value})) * 100
            label = f"{dim}={value}"
            print(
                f"{system.name:<10}{label:<12}{len(err):>8}{np.median(err):>16.1f}"
                f"{np.percentile(err, 90):>8.1f}"
            )


if __name__ == "__main__":
    main()
