"""Per-group errors over every dense vLLM aggregated row of aiconfigurator's silicon corpus.

The corpus ships in the installed aiconfigurator-core package (`systems/silicon_sample.csv`);
its dense vLLM agg rows on H100 / H200 / B200 are Qwen3-32B (bf16 and fp8), Llama-3.1-70B
(fp8, and nvfp4 on B200) and Llama-3.1-8B-Instruct-FP8:
339 rows. Each is simulated with the defaults of `vidur-fast validate` (or the settings given
after `--`), and the table shows, per (model, system, precision), rows, simulated, TTFT and
TPOT MAPE and signed bias, the rows whose measured throughput exceeds the device (physics
check) and the largest prefill-GEMM load.

    python bench/bench_silicon.py                       # all 339 rows
    python bench/bench_silicon.py --max-rows-per-group 6 --out rows.csv
    python bench/bench_silicon.py -- --sim.scheduler.max-num-partial-prefills 0
"""

import argparse
import sys
import time

from vidur_fast.validation.silicon.run import (
    SiliconValidateConfig,
    format_groups,
    simulate_silicon,
)

DENSE_MODELS = ("Qwen/Qwen3-32B", "meta-llama/Llama-3.1-70B", "nvidia/Llama-3.1-8B-Instruct-FP8")
SYSTEMS = ("h100_sxm", "h200_sxm", "b200_sxm")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-rows-per-group", type=int, default=0)
    ap.add_argument("--out", default=None, help="per-row CSV")
    ap.add_argument("--rows", action="store_true", help="print the per-row table too")
    args, rest = ap.parse_known_args(argv)
    if rest and rest[0] == "--":
        rest = rest[1:]
    import tyro

    cfg = tyro.cli(
        SiliconValidateConfig,
        args=rest,
        default=SiliconValidateConfig(
            backend="vllm",
            mode="agg",
            model=DENSE_MODELS,
            system=SYSTEMS,
            max_rows_per_group=args.max_rows_per_group,
            out=args.out,
            quiet=True,
        ),
    )
    # exact model names (the filter itself matches substrings)
    t0 = time.perf_counter()
    df = simulate_silicon(cfg)
    df = df[df["model"].isin(DENSE_MODELS)]
    print(format_groups(df, per_row=args.rows))
    print(f"wall {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    if cfg.out:
        df.to_csv(cfg.out, index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
