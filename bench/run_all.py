"""Speed and memory of whole runs: one table over the reference scenarios.

Each scenario runs in a fresh subprocess (simulate + write the run directory, as the CLI does),
so wall time covers the whole process and peak RSS is per scenario. CPU time (user + sys of
the process) is printed next to wall time: on a busy machine it is the steadier figure.
Two runs per scenario: `cold` with an empty Numba cache (every kernel the scenario uses
compiles, the shipped kernel bundle unused unless VIDUR_FAST_KERNEL_BUNDLE=1; cold_s wall,
cold_cpu_s user + sys, with the processes that compile the loop's callees in parallel), `warm`
with the caches filled. Timing grids
come from the grid cache in both (a missing grid is built in the first run). write_cpu_s:
writing the run directory (metrics.h5, request CSV); loop_s / loop_cpu_s: the simulation
loop alone (kernels already loaded); vllm_v1 runs use its
default, prefix caching on (synthetic requests carry no prefix hashes, so nothing hits);
req/s = requests / loop_cpu_s. The `floor` row runs synth1m's workload through a bare jitted
chunked-prefill loop (bench/floor_loop.py) with the same replicas and token budget, so the
ratio of the simulator's loop to the cheapest loop over the same requests is visible.

    python bench/run_all.py                      # every scenario, cold and warm
    python bench/run_all.py --only conv25k s1    # a subset
    python bench/run_all.py --no-cold            # warm runs only
    python bench/run_all.py --no-request-csv     # without request_metrics.csv

Scenarios that need files outside the repo (Vidur's S1 case, public traces) look for them
under --shared (default: ../shared next to the repo) and are skipped when absent.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# name -> (label, description)
SCENARIOS = {
    "default": "the default `vidur-fast` run: Llama-3-8B, one H100, vllm_v1, 1,000 requests",
    "s1": "S1 replay: Vidur case S1 via vidur-compat (Llama-3-8B, A100, sarathi), 1 replica",
    "conv25k": "splitwise_conv lengths, Poisson 20 qps, sarathi, 4 replicas",
    "mooncake12k": "Mooncake conversation trace, Llama-3.1-8B, vllm_v1 (prefix caching), "
    "8 replicas",
    "synth1m": "1M requests, splitwise_conv lengths, Poisson 300 qps, vllm_v1, 64 replicas",
    "synth1m_nopc": "as synth1m, prefix caching off",
    "synth125k": "an eighth of synth1m at the same load per replica: 125,000 requests, "
    "Poisson 37.5 qps, vllm_v1, 8 replicas",
    "synth125k_nopc": "as synth125k, prefix caching off",
    "ctx128k": "Llama-3.1-8B, 130,000-token prompts + 1,000 output, vllm_v1, 1 replica",
    "r1000": "1M requests, splitwise_conv lengths, Poisson 4,700 qps, vllm_v1, 1,000 replicas",
    "floor": "the floor: synth1m's requests through a bare jitted chunked-prefill loop "
    "(bench/floor_loop.py: no memory or timing model, round-robin, replicas one by one)",
}


def scenario_config(name: str, shared: Path, out_dir: str):
    """The SimConfig of one scenario (None when its input files are missing)."""
    from dataclasses import replace

    from vidur_fast.config.sim import (
        ClusterConfig,
        OutputConfig,
        SarathiScheduler,
        SimConfig,
        VllmV1Scheduler,
    )
    from vidur_fast.config.workload import (
        FixedLengths,
        PoissonIntervals,
        SyntheticWorkload,
        TraceLengths,
        TraceWorkload,
    )

    out = OutputConfig(dir=out_dir)
    if name == "default":
        return SimConfig(output=out, quiet=True)
    conv = shared / "traces" / "vidur" / "splitwise_conv.csv.gz"
    if name == "s1":
        case = shared / "reference" / "vidur" / "cases" / "S1"
        if not (case / "case.json").is_file():
            return None
        from vidur_fast.config.vidur_flags import config_from_vidur_args

        spec = json.loads((case / "case.json").read_text())
        subs = {"{PROFILES}": str(shared / "profiles" / "vidur_format"), "{CASE}": str(case)}
        args = []
        for a in spec["vidur_args"]:
            for k, v in subs.items():
                a = a.replace(k, v)
            args.append(a)
        return replace(config_from_vidur_args(args), output=out, quiet=True)
    if name == "mooncake12k":
        trace = shared / "traces" / "mooncake" / "conversation_trace.jsonl.gz"
        if not trace.is_file():
            return None
        return SimConfig(
            cluster=ClusterConfig(model="meta-llama/Llama-3.1-8B", num_replicas=8),
            workload=TraceWorkload(path=str(trace)),
            scheduler=VllmV1Scheduler(),
            output=out,
            quiet=True,
        )
    if name == "ctx128k":
        return SimConfig(
            cluster=ClusterConfig(model="meta-llama/Llama-3.1-8B"),
            workload=SyntheticWorkload(
                num_requests=200,
                lengths=FixedLengths(prefill_tokens=130_000, decode_tokens=1_000),
                intervals=PoissonIntervals(qps=0.05),
            ),
            scheduler=VllmV1Scheduler(),
            output=out,
            quiet=True,
        )
    if not conv.is_file():
        return None
    lengths = TraceLengths(path=str(conv))
    n, replicas, qps, sched = {
        "conv25k": (25_000, 4, 20.0, SarathiScheduler()),
        "synth1m": (1_000_000, 64, 300.0, VllmV1Scheduler()),
        "synth1m_nopc": (1_000_000, 64, 300.0, VllmV1Scheduler(enable_prefix_caching=False)),
        "synth125k": (125_000, 8, 37.5, VllmV1Scheduler()),
        "synth125k_nopc": (125_000, 8, 37.5, VllmV1Scheduler(enable_prefix_caching=False)),
        "r1000": (1_000_000, 1000, 4700.0, VllmV1Scheduler()),
    }[name]
    return SimConfig(
        cluster=ClusterConfig(num_replicas=replicas),
        workload=SyntheticWorkload(
            num_requests=n, lengths=lengths, intervals=PoissonIntervals(qps=qps)
        ),
        scheduler=sched,
        output=out,
        quiet=True,
    )


def worker(name: str, shared: Path, request_csv: bool = True) -> None:
    """Run one scenario in this process and print one JSON line of figures."""
    import resource
    from dataclasses import replace

    t0 = time.perf_counter()
    if name == "floor":
        floor_worker(shared)
        return
    from vidur_fast.commands.main import (
        freeze_heap,
        imports_without_gc,
        release_freed_memory,
        single_threaded_blas,
    )

    single_threaded_blas()  # as `vidur-fast` does first
    imports_without_gc()  # as `vidur-fast simulate` does before its imports
    from vidur_fast.api import simulate
    from vidur_fast.outputs.writer import write_run

    with tempfile.TemporaryDirectory(prefix="vidur-fast-bench-") as tmp:
        cfg = scenario_config(name, shared, str(Path(tmp) / "run"))
        if cfg is None:
            print(json.dumps({"skipped": True}))
            return
        cfg = replace(cfg, output=replace(cfg.output, write_request_csv=request_csv))
        freeze_heap()  # as `vidur-fast simulate` does after its imports
        t_sim, c_sim = time.perf_counter(), time.process_time()
        result = simulate(cfg)
        release_freed_memory()  # as the CLI does between simulating and writing
        t_write, c_write = time.perf_counter(), time.process_time()
        write_run(result, cfg.output)
        t_end, c_end = time.perf_counter(), time.process_time()
        s = result.summary
        figures = {
            "requests": s["num_requests"],
            "completed": s["num_completed"],
            "replicas": cfg.cluster.num_replicas,
            "batches": s["num_batches"],
            "batches_spilled": result.batch_log.spilled_rows,
            "simulated_s": s["simulated_time_s"],
            "phases_s": result.phases_s,
            "import_s": t_sim - t0,
            "simulate_s": t_write - t_sim,
            "write_s": t_end - t_write,
            "simulate_cpu_s": c_write - c_sim,
            "write_cpu_s": c_end - c_write,
        }
    usage = resource.getrusage(resource.RUSAGE_SELF)
    # with the processes that compiled the loop's callees on a cold cache (engine/jit_plan.py)
    pool = resource.getrusage(resource.RUSAGE_CHILDREN)
    figures["cpu_s"] = usage.ru_utime + usage.ru_stime + pool.ru_utime + pool.ru_stime
    figures["peak_rss_mb"] = usage.ru_maxrss / 1024
    print(json.dumps(figures))
    freeze_heap()  # and before exit, as the CLI does


def floor_worker(shared: Path) -> None:
    """The floor row's figures, in the keys of a scenario's."""
    import resource

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from floor_loop import synth1m_floor

    f = synth1m_floor(shared)
    if f is None:
        print(json.dumps({"skipped": True}))
        return
    usage = resource.getrusage(resource.RUSAGE_SELF)
    figures = {
        "requests": f["requests"],
        "replicas": f["replicas"],
        "batches": f["steps"],
        "batches_spilled": 0,
        "request_iterations": f["request_iterations"],
        "phases_s": {"jit_s": f["jit_s"], "loop_s": f["loop_s"], "loop_cpu_s": f["loop_cpu_s"]},
        "write_cpu_s": 0.0,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mb": usage.ru_maxrss / 1024,
    }
    print(json.dumps(figures))


def run_child(name: str, shared: Path, numba_cache: str | None, request_csv: bool) -> dict:
    env = dict(os.environ)
    if numba_cache is not None:
        env["NUMBA_CACHE_DIR"] = numba_cache
        # the cold row measures compiling: without the shipped kernel bundle unless asked
        env.setdefault("VIDUR_FAST_KERNEL_BUNDLE", "0")
    cmd = [sys.executable, __file__, "--worker", name, "--shared", str(shared)]
    if not request_csv:
        cmd.append("--no-request-csv")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["?"]
        return {"error": tail[0], "wall_s": wall}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["wall_s"] = wall
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", choices=list(SCENARIOS), help="scenarios to run")
    ap.add_argument("--no-cold", action="store_true", help="skip the empty-JIT-cache runs")
    ap.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    ap.add_argument("--json", type=Path, help="also write every figure to this file")
    ap.add_argument(
        "--no-request-csv", action="store_true", help="do not write request_metrics.csv"
    )
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.shared, not args.no_request_csv)
        if args.worker != "floor":
            from vidur_fast.commands.main import exit_now

            exit_now(0)  # as `vidur-fast` leaves
        return
    names = sorted(args.only or list(SCENARIOS), key=lambda n: n == "floor")  # floor last
    rows = {}
    header = (
        f"{'scenario':<12} {'requests':>9} {'replicas':>8} {'cold_s':>7} {'cold_cpu_s':>10} "
        f"{'warm_s':>7} "
        f"{'warm_cpu_s':>10} {'write_cpu_s':>11} {'loop_s':>7} {'loop_cpu_s':>10} {'req/s':>9} "
        f"{'rss_mb':>7}  notes"
    )
    print(header)
    print("-" * len(header))
    for name in names:
        cold = None
        if not args.no_cold:
            with tempfile.TemporaryDirectory(prefix="vidur-fast-numba-") as cache:
                cold = run_child(name, args.shared, cache, not args.no_request_csv)
        warm = run_child(name, args.shared, None, not args.no_request_csv)
        rows[name] = {"description": SCENARIOS[name], "cold": cold, "warm": warm}
        if warm.get("skipped"):
            print(f"{name:<12} skipped (input files not found under {args.shared})")
            continue
        if "error" in warm:
            print(f"{name:<12} failed: {warm['error']}")
            continue
        ph = warm["phases_s"]
        cold_ok = cold and "error" not in cold
        cold_s = f"{'-':>7} {'-':>10}"
        if cold_ok:
            cold_s = f"{cold['wall_s']:7.2f} {cold['cpu_s']:10.2f}"
        note = SCENARIOS[name]
        if name == "floor":
            ns = ph["loop_cpu_s"] / max(warm["request_iterations"], 1) * 1e9
            note = (
                f"bare chunked-prefill loop over synth1m's requests: {warm['batches']:,} steps, "
                f"{ns:.1f} ns per request-iteration"
            )
            sim = rows.get("synth1m", {}).get("warm") or {}
            if "phases_s" in sim:
                ratio = sim["phases_s"]["loop_cpu_s"] / ph["loop_cpu_s"]
                note += f"; synth1m's loop is {ratio:.0f}x this"
        elif warm["batches_spilled"]:
            note += f"; {warm['batches']:,} batches ({warm['batches_spilled']:,} spilled)"
        print(
            f"{name:<12} {warm['requests']:>9,} {warm['replicas']:>8,} {cold_s} "
            f"{warm['wall_s']:7.2f} {warm['cpu_s']:10.2f} {warm['write_cpu_s']:11.2f} "
            f"{ph['loop_s']:7.2f} "
            f"{ph['loop_cpu_s']:10.2f} {warm['requests'] / ph['loop_cpu_s']:>9,.0f} "
            f"{warm['peak_rss_mb']:>7,.0f}  {note}",
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
