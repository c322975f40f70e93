"""Per-group errors over every dense vLLM aggregated row of aiconfigurator's silicon corpus.

The corpus ships in the installed aiconfigurator-core package (`systems/silicon_sample.csv`);
its dense vLLM agg rows on H100 / H200 / B200 are Qwen3-32B (bf16 and fp8), Llama-3.1-70B
(fp8, and nvfp4 on B200) and Llama-3.1-8B-Instruct-FP8:
339 rows. Each is simulated with the defaults of `vidur-fast validate` (or the settings given
after `--`), and the table shows, per (model, system, precision), rows, simulated, TTFT and
TPOT MAPE and signed bias, the rows whose measured throughput exceeds the device (physics
check) and the largest prefill-GEMM load.

Then the same for the 354 MoE vLLM agg rows on H100 / H200 (gpt-oss-120b, MiniMax-M2.5,
Qwen3-235B-A22B-FP8, Kimi-K2.5; docs/timing_model.md "MoE layers").

Then the 1,602 disaggregated rows (prefill and decode pools, docs/validation.md
"Disaggregated rows"): each listed with why it is not simulated (other backends, systems the
catalog lacks, the three Hopper vLLM rows held out for their unrecorded client count), then
those three rows simulated with decode_batch_size x decode workers as the client count
(`--no-campaign-facts`), a what-if whose errors are reported, not a target.

    python bench/bench_silicon.py                       # all 339 dense rows, then the MoE rows
    python bench/bench_silicon.py --max-rows-per-group 6 --out rows.csv
    python bench/bench_silicon.py --only dense          # or --only moe, --only disagg
    python bench/bench_silicon.py -- --sim.scheduler.max-num-partial-prefills 0
"""

import argparse
import sys
import time

from vidur_fast.validation.silicon.run import (
    SiliconValidateConfig,
    format_disagg,
    format_groups,
    simulate_silicon,
)

DENSE_MODELS = ("Qwen/Qwen3-32B", "meta-llama/Llama-3.1-70B", "nvidia/Llama-3.1-8B-Instruct-FP8")
SYSTEMS = ("h100_sxm", "h200_sxm", "b200_sxm")
MOE_MODELS = (
    "openai/gpt-oss-120b",
    "MiniMaxAI/MiniMax-M2.5",
    "Qwen/Qwen3-235B-A22B-FP8",
    "moonshotai/Kimi-K2.5",
)
MOE_SYSTEMS = ("h100_sxm", "h200_sxm")
# the disaggregated vLLM rows on Hopper (NVIDIA Dynamo vllm-runtime 0.8.0)
DISAGG_MODELS = ("Qwen/Qwen3-235B-A22B-FP8", "Qwen/Qwen3-32B")
DISAGG_SYSTEMS = ("h100_sxm", "h200_sxm")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-rows-per-group", type=int, default=0)
    ap.add_argument("--out", default=None, help="per-row CSV")
    ap.add_argument("--rows", action="store_true", help="print the per-row table too")
    ap.add_argument(
        "--only", choices=("dense", "moe", "disagg"), default=None, help="one table only"
    )
    args, rest = ap.parse_known_args(argv)
    if rest and rest[0] == "--":
        rest = rest[1:]
    import tyro

    from vidur_fast.config.markers import use_tyro_markers

    use_tyro_markers()  # the config classes' CLI markers as tyro's
    t0 = time.perf_counter()
    frames = []
    for kind, models, systems in (
        ("dense", DENSE_MODELS, SYSTEMS),
        ("moe", MOE_MODELS, MOE_SYSTEMS),
    ):
        if args.only not in (None, kind):
            continue
        cfg = tyro.cli(
            SiliconValidateConfig,
            args=rest,
            default=SiliconValidateConfig(
                backend="vllm",
                mode="agg",
                model=models,
                system=systems,
                max_rows_per_group=args.max_rows_per_group,
                out=None,
                quiet=True,
            ),
        )
        df = simulate_silicon(cfg)
        # exact model names (the filter itself matches substrings)
        df = df[df["model"].isin(models)]
        if kind == "moe":
            print("\nMixture-of-experts rows (H100, H200):")
        print(format_groups(df, per_row=args.rows))
        frames.append(df)
    if args.only in (None, "disagg"):
        frames.extend(_disagg(rest))
    print(f"wall {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    if args.out:
        import pandas as pd

        pd.concat(frames).to_csv(args.out, index=False)
    return 0


def _disagg(rest: list[str]) -> list:
    """Every disaggregated row with its reason, then the Hopper vLLM rows as a what-if."""
    import tyro

    from vidur_fast.config.markers import use_tyro_markers

    use_tyro_markers()
    print("\nDisaggregated rows (every backend and system):")
    base = SiliconValidateConfig(backend="all", mode="disagg", out=None, quiet=True)
    df = simulate_silicon(tyro.cli(SiliconValidateConfig, args=rest, default=base))
    print(format_disagg(df))
    print(
        "\nWhat-if, the Hopper vLLM rows with decode_batch_size x decode workers as the client "
        "count (--no-campaign-facts; no target):"
    )
    what_if = SiliconValidateConfig(
        backend="vllm",
        mode="disagg",
        model=DISAGG_MODELS,
        system=DISAGG_SYSTEMS,
        campaign_facts=False,
        out=None,
        quiet=True,
    )
    wf = simulate_silicon(tyro.cli(SiliconValidateConfig, args=rest, default=what_if))
    print(format_disagg(wf))
    return [df, wf.assign(what_if="no_campaign_facts")]


if __name__ == "__main__":
    raise SystemExit(main())
