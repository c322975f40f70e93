"""Held-out accuracy of the per-operator models on measured data.

For each configuration: per-operator MAPE (%) on a deterministic 20% hold-out, for the default
random forest (fit on time / work baseline), the plain forest on raw time (Vidur's fit) and the
polynomial regressor. `data` says whether an operator's samples are measured; synthetic
(Vidur attention.csv here is a roofline, see shared/profiles/vidur_format/README.md) and
analytic (aiconfigurator has no norm/rope/act/add/kv-save data) rows are shown but not
judged. Target: default random forest <= 5% on every measured operator.

A second section checks the extrapolation rule: fit on a table truncated at a token / kv + chunk
limit, then score the rows beyond it.

    .venv/bin/python bench/bench_timing_accuracy.py
"""

import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from vidur_fast.catalog import default_node_for, get_device, get_model, get_node
from vidur_fast.config.predictor import PredictorConfig
from vidur_fast.timing.build import held_out_accuracy
from vidur_fast.timing.fit import clean_rows, fit_op, op_tables
from vidur_fast.timing.grids import evaluate_points
from vidur_fast.timing.sources import load_samples

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
VIDUR_DIR = SHARED / "profiles" / "vidur_format"
GEMMS = {"attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj"}
MLP_CSV_OPS = GEMMS | {
    "attn_rope",
    "input_layernorm",
    "post_attention_layernorm",
    "mlp_act",
    "add",
}

CASES = [
    ("vidur", "meta-llama/Meta-Llama-3-8B", "a100", 1),
    ("vidur", "meta-llama/Llama-2-7b-hf", "h100", 1),
    ("vidur", "meta-llama/Llama-2-70b-hf", "a100", 2),
    ("vidur", "meta-llama/Llama-2-70b-hf", "a100", 4),
    ("aiconfigurator", "meta-llama/Meta-Llama-3-8B", "h100", 1),
    ("aiconfigurator", "Qwen/Qwen3-32B", "h100", 2),
]

VARIANTS = {
    "rf": PredictorConfig(),
    "rf_plain": PredictorConfig(work_normalized=False),
    "poly3": PredictorConfig(regressor="polynomial"),
}


def data_kind(source: str, op: str) -> str:
    if op == "all_reduce" or op == "send_recv":
        return "measured"
    if source == "vidur":
        return "measured" if op in MLP_CSV_OPS else "synthetic"
    return "measured" if op in GEMMS or op in ("decode", "prefill") else "analytic"


EXTRAPOLATION_CASES = [
    ("aiconfigurator", "meta-llama/Meta-Llama-3-8B", "h100", 1, 16384),
    ("vidur", "meta-llama/Meta-Llama-3-8B", "a100", 1, 4096),
]


def samples_for(source: str, model: str, device: str, tp: int):
    dev = get_device(device)
    return load_samples(
        source,
        get_model(model),
        dev,
        get_node(default_node_for(dev.name)),
        tp,
        1,
        profile_dir=str(VIDUR_DIR) if source == "vidur" else None,
    )


def one_case(source: str, model: str, device: str, tp: int) -> pd.DataFrame:
    samples = samples_for(source, model, device, tp)
    table = None
    for name, cfg in VARIANTS.items():
        df = held_out_accuracy(samples, replace(cfg, source=source))
        col = df[["op", "n_train", "n_test", "mape_pct"]].rename(columns={"mape_pct": name})
        if name == "rf":
            col["rf_p95"] = df["p95_ape_pct"]
        table = col if table is None else table.merge(col[["op", name]], on="op")
    table["data"] = [data_kind(source, op) for op in table["op"]]
    return table


def extrapolation(source: str, model: str, device: str, tp: int, cut: int) -> pd.DataFrame:
    """Fit on tokens <= cut (token ops) or kv (+ chunk) <= cut; score the rows beyond."""
    rows = []
    for name, (kind, X, y) in op_tables(samples_for(source, model, device, tp)).items():
        X, y, _ = clean_rows(name, X, y)
        reach = X[:, 0] if kind == "tokens" else X[:, 1] + (X[:, 0] if kind == "prefill" else 0)
        train = reach <= cut
        if len(y) < 5 or train.all() or data_kind(source, name) != "measured":
            continue
        m = fit_op(name, kind, X[train], y[train], PredictorConfig())
        ape = 100 * np.abs(evaluate_points(m, X[~train]) / y[~train] - 1)
        rows.append(
            {
                "op": name,
                "n_beyond": int((~train).sum()),
                "reach": f"{int(reach[~train].max())}",
                "mape_pct": ape.mean(),
                "max_ape_pct": ape.max(),
            }
        )
    return pd.DataFrame(rows)


def main() -> None:
    pd.set_option("display.width", 120)
    worst = []
    for source, model, device, tp in CASES:
        t0 = time.perf_counter()
        table = one_case(source, model, device, tp)
        print(f"\n== {source}: {model} on {device} TP{tp} ({time.perf_counter() - t0:.1f} s)")
        print(table.round(2).to_string(index=False))
        measured = table[table["data"] == "measured"]
        worst.append((f"{source} {model.split('/')[-1]} {device} TP{tp}", measured["rf"].max()))
    print("\nworst measured-operator MAPE, default random forest (target <= 5%):")
    for label, value in worst:
        print(f"  {label:45s} {value:5.2f}%  {'ok' if value <= 5 else 'ABOVE TARGET'}")
    for source, model, device, tp, cut in EXTRAPOLATION_CASES:
        print(f"\n== extrapolation: {source} {model} {device} TP{tp}, fit up to {cut}")
        table = extrapolation(source, model, device, tp, cut)
        print(table.round(2).to_string(index=False))


if __name__ == "__main__":
    main()
