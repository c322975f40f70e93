"""What-if: B200 Llama-3.1-70B silicon rows with every GEMM timed from another framework's table.

The validator times vLLM rows from aiconfigurator's vLLM tables. This bench swaps only the
GEMM table (attention, all-reduce and the rest stay vLLM's) for the newest TensorRT-LLM or
SGLang one of the same system, and prints the per-group table of `bench_silicon.py` for
those rows. Its grids go to a cache directory of their own (beside the default one), as the
grid cache's input memo does not see the swap. docs/validation.md ("NVFP4 decode: the
campaign's GEMM kernel") reports the TensorRT-LLM swap: no table times the campaign's own GEMM
kernels, so the swap is a comparison, not a setting.

    python bench/bench_gemm_table_whatif.py                  # TensorRT-LLM GEMM tables
    python bench/bench_gemm_table_whatif.py --framework sglang
"""

import argparse
import sys
from contextlib import contextmanager
from pathlib import Path

import vidur_fast.timing.sources.aiconfigurator as aic
from vidur_fast.timing.cache import default_cache_dir

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_silicon  # noqa: E402

MODEL = "meta-llama/Llama-3.1-70B"
SYSTEM = "b200_sxm"


@contextmanager
def gemm_tables_of(framework: str):
    """Within the block, the aiconfigurator source reads GEMM tables of `framework`."""
    original = aic.newest_table

    def swapped(system, family, backend, table):
        return original(system, family, framework if family == "gemm" else backend, table)

    aic.newest_table = swapped
    try:
        yield
    finally:
        aic.newest_table = original


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--framework", choices=("trtllm", "sglang"), default="trtllm")
    args = ap.parse_args(argv)
    print(f"{MODEL} on {SYSTEM}, GEMMs from the {args.framework} tables:")
    cache = default_cache_dir().parent / f"{default_cache_dir().name}-gemm-{args.framework}"
    sim = ["--model", MODEL, "--system", SYSTEM, "--sim.predictor.cache-dir", str(cache)]
    with gemm_tables_of(args.framework):
        return bench_silicon.main(["--only", "dense", "--", *sim])


if __name__ == "__main__":
    raise SystemExit(main())
