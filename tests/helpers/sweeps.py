"""Small sweep files shared by the sweep, capacity and Ray tests."""

# Small timing grids and ~100-request workloads keep every point well under a second.
FAST_PREDICTOR = {
    "source": "roofline",
    "max_tokens": 4096,
    "max_prefill_chunk": 2048,
    "max_batch_size": 32,
    "n_estimators": 10,
}


def small_base(cache_dir) -> dict:
    return {
        "workload": {
            "type": "synthetic",
            "num_requests": 120,
            "lengths": {"type": "uniform", "min_tokens": 128, "max_tokens": 1024},
            "intervals": {"type": "poisson", "qps": 4.0},
        },
        "predictor": {**FAST_PREDICTOR, "cache_dir": str(cache_dir)},
    }


def small_sweep(cache_dir) -> dict:
    # tp 3 does not divide Llama-3-8B's 32 heads: those points fail and are recorded
    return {
        "base": small_base(cache_dir),
        "grid": {
            "tp": [1, 3],
            "scheduler": ["vllm_v1", {"type": "sarathi", "chunk_size": 256}],
            "qps": [4, 16],
        },
    }
