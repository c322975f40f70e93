"""Sampling profile of the simulation loop, by source line of the kernels.

The kernels are inlined into one machine-code function (kernels/loop.py run_nb), so a
function-level profile says nothing. This script compiles the kernels once more with line
tables only (a private Numba cache, so the normal cache is untouched; optimisation and
inlining as usual), runs a bench scenario under `perf record`, and maps every sample inside
the jitted code to the innermost kernel source line (the line of the helper that was inlined,
not the line that called it).

    python bench/profile_loop.py mooncake12k            # top lines of the Mooncake loop
    python bench/profile_loop.py conv25k --top 60

Needs Linux `perf` (perf_event_paranoid <= 2 is enough for a child process) and binutils
(`readelf`). The first run of a scenario compiles the kernels (~1-2 minutes); later runs
reuse the profile cache under --cache until a kernel source changes. Scenarios and --shared
as in run_all.py.
"""

import argparse
import bisect
import collections
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _line_tables_only() -> None:
    """Numba's full debug info keeps every variable in memory and disables inlining (the loop
    runs ~8x slower); line directives alone leave the optimised code as it is. Debug info
    also turns on bounds checks and extended variable lifetimes unless a kernel sets them:
    off here (with them the loop ran 20x slower and the profile was of the checks)."""
    from numba.core import cpu

    finalize = cpu.CPUTargetOptions.finalize

    def patched(self, flags, options):
        checks = flags.is_set("boundscheck")
        finalize(self, flags, options)
        if flags.debuginfo:
            flags.dbg_directives_only = True
            flags.dbg_extend_lifetimes = False
            if not checks:
                flags.boundscheck = False

    cpu.CPUTargetOptions.finalize = patched


def worker(name: str, shared: Path, out: Path) -> None:
    """Run one scenario (kernels already cached with line tables), then record where every
    function of the loop's code library was loaded, for the parent to map samples."""
    _line_tables_only()
    import run_all
    from vidur_fast.kernels import loop

    from vidur_fast.api import simulate
    from vidur_fast.config.validate import is_pd
    from vidur_fast.params.setup import router_code, scheduler_policy

    cfg = run_all.scenario_config(name, shared, str(out / "run"))
    if cfg is None:
        sys.exit(f"error: scenario {name} needs files under {shared}")
    result = simulate(cfg)
    pools_on, pd_on = bool(cfg.cluster.pools), is_pd(cfg.cluster)
    kernel = loop.loop_kernel(scheduler_policy(cfg.scheduler), pools_on, pd_on, router_code(cfg))
    library = kernel.overloads[kernel.signatures[0]].library
    obj = out / "loop.o"
    try:
        obj.write_bytes(library._get_compiled_object())  # compiled in this process
    except RuntimeError:  # loaded from the cache: the object saved when it was compiled
        if not obj.exists():
            sys.exit("error: no object code; remove the profile cache and run again")
    symbols = subprocess.run(["readelf", "-sW", str(obj)], capture_output=True, text=True)
    funcs = []
    for line in symbols.stdout.splitlines():
        f = line.split()
        if len(f) >= 8 and f[3] == "FUNC" and f[6].isdigit():
            try:
                addr = library.get_pointer_to_function(f[7])
            except Exception:  # noqa: BLE001 - a symbol the engine did not keep
                continue
            if addr:
                funcs.append(
                    {
                        "name": f[7],
                        "addr": addr,
                        "size": int(f[2], 0),
                        "section": int(f[6]),
                        "value": int(f[1], 16),
                    }
                )
    (out / "functions.json").write_text(json.dumps(funcs))
    print(json.dumps({"loop_cpu_s": result.phases_s["loop_cpu_s"]}))


def _short(symbol: str) -> str:
    """Numba's mangled name -> module.function."""
    parts = re.findall(r"\d+([A-Za-z_]\w*?)(?=B\d|\d|E)", symbol.split("B", 1)[0] + "E")
    return ".".join(parts[-2:]) if parts else symbol[:60]


def _line_table(obj: Path) -> list[tuple[int, str, int]]:
    """(section offset, file, line) rows of the object's decoded line table, by address."""
    text = subprocess.run(
        ["readelf", "--debug-dump=decodedline", str(obj)], capture_output=True, text=True
    ).stdout
    rows = []
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 3 and f[0].endswith(".py") and f[1].isdigit():
            addr = f[2]
            if addr == "0" or addr.startswith("0x"):
                rows.append((int(addr, 16), f[0], int(f[1])))
    rows.sort(key=lambda row: row[0])
    return rows


def report(out: Path, top: int) -> None:
    funcs = sorted(json.loads((out / "functions.json").read_text()), key=lambda f: f["addr"])
    starts = [f["addr"] for f in funcs]
    rows = _line_table(out / "loop.o")
    row_addr = [row[0] for row in rows]
    ips = subprocess.run(
        ["perf", "script", "-F", "ip", "-i", str(out / "perf.data")],
        capture_output=True,
        text=True,
    ).stdout.split()
    by_func = collections.Counter()
    by_line = collections.Counter()
    for ip in ips:
        a = int(ip, 16)
        k = bisect.bisect_right(starts, a) - 1
        if k < 0 or a >= funcs[k]["addr"] + funcs[k]["size"]:
            continue
        f = funcs[k]
        by_func[_short(f["name"])] += 1
        offset = a - f["addr"] + f["value"]
        j = bisect.bisect_right(row_addr, offset) - 1
        if j < 0 or rows[j][0] < f["value"]:
            by_line["?"] += 1
            continue
        _, file, line = rows[j]
        # line 0: code the compiler made up (spills, merged tails), not one source line
        by_line[f"kernels/{file}:{line}" if line else f"kernels/{file}:? (no line)"] += 1
    total = len(ips)
    in_jit = sum(by_func.values())
    print(f"{total} samples, {in_jit} ({100 * in_jit / max(total, 1):.0f}%) in jitted code")
    print("\nby machine-code function (% of all samples):")
    for name, n in by_func.most_common(10):
        print(f"  {100 * n / total:5.1f}%  {name}")
    print("\nby kernel source line, innermost (% of all samples):")
    for line, n in by_line.most_common(top):
        src = ""
        path = REPO / line.split(":")[0]
        num = line.split(":")[1]
        if num.isdigit() and path.exists():
            src = path.read_text().splitlines()[int(num) - 1].strip()[:70]
        print(f"  {100 * n / total:5.1f}%  {line:<28} {src}")


def main() -> None:
    import run_all

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario", choices=list(run_all.SCENARIOS))
    ap.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/vidur-fast-profile"))
    ap.add_argument("--freq", type=int, default=1999, help="samples per second")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.scenario, args.shared, args.worker)
        return
    for tool in ("perf", "readelf"):
        if shutil.which(tool) is None:
            sys.exit(f"error: {tool} not found (install linux perf and binutils)")
    out = args.cache / args.scenario
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, NUMBA_DEBUGINFO="1", NUMBA_CACHE_DIR=str(args.cache / "numba"))
    # every kernel compiled in this process, under the line-tables patch: the engine's compile
    # processes (engine/jit_plan.py) would compile the callees with full debug info (bounds
    # checks, no inlining; the loop ran 20-30x slower) and without the shipped bundle's code
    env["VIDUR_FAST_COMPILE_WORKERS"] = "0"
    env["VIDUR_FAST_KERNEL_BUNDLE"] = "0"
    child = [sys.executable, __file__, args.scenario, "--shared", str(args.shared)]
    child += ["--worker", str(out)]
    # Numba revalidates a cached function against its own file only, not the kernels it
    # inlined: any kernel source change means compiling everything again
    sources = hashlib.sha256(
        b"".join(p.read_bytes() for p in sorted((REPO / "kernels").glob("*.py")))
    ).hexdigest()
    stamp = out / "kernels.sha256"
    if not (out / "loop.o").exists() or not stamp.exists() or stamp.read_text() != sources:
        print("compiling the kernels with line tables (once per source) ...", file=sys.stderr)
        shutil.rmtree(args.cache / "numba", ignore_errors=True)
        (out / "loop.o").unlink(missing_ok=True)
        subprocess.run(child, env=env, check=True, stdout=subprocess.DEVNULL)
        stamp.write_text(sources)
    perf = ["perf", "record", "-q", "-F", str(args.freq), "-e", "cpu-clock"]
    perf += ["-o", str(out / "perf.data"), "--"]
    subprocess.run(perf + child, env=env, check=True)
    report(out, args.top)


if __name__ == "__main__":
    main()
