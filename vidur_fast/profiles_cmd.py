"""`vidur-fast profiles` actions: list catalogs and sources, build grids, show op times."""

import numpy as np

from vidur_fast.catalog import (
    default_node_for,
    get_device,
    get_model,
    get_node,
    list_devices,
    list_models,
    list_nodes,
)


def profiles_list(profile_dir: str | None) -> int:
    from vidur_fast.timing.sources import SOURCES, available

    print("models:  " + ", ".join(list_models()))
    print("devices: " + ", ".join(list_devices()))
    print("nodes:   " + ", ".join(list_nodes()))
    for src in SOURCES:
        if src == "vidur" and profile_dir is None:
            print("source vidur: pass --profile-dir DIR (a Vidur data/profiling layout)")
            continue
        info = available(src, profile_dir if src == "vidur" else None)
        print(f"source {src}: {info}")
    return 0


def _load(args):
    from vidur_fast.timing.build import build_timing

    model = get_model(args.model)
    device = get_device(args.device)
    node = get_node(args.node or default_node_for(device.name))
    model.check_parallelism(args.tp, args.pp)
    return model, build_timing(model, device, node, args.tp, args.pp, args.predictor, progress=True)


def profiles_build(args) -> int:
    _, timing = _load(args)
    meta = timing.meta
    print(
        f"grids ready: source {meta.get('source')}, key {meta.get('key')}, "
        f"from cache {meta.get('from_cache')}, at {meta.get('cache_path')}"
    )
    return 0


def profiles_show(args) -> int:
    _, timing = _load(args)
    g, tp = timing.grids, timing.params
    print(f"per-layer times (ms), {args.model} on {args.device} TP{args.tp} PP{args.pp}")
    print(f"{'tokens':>8} {'linear+norm':>12} {'kv_save':>9} {'allreduce':>10}")
    for n in (8, 64, 512, 2048, 8192, 32768, 131072):
        if n < g.tok_ms.shape[0]:
            print(f"{n:>8} {g.tok_ms[n]:>12.4f} {g.kv_save_ms[n]:>9.4f} {g.allreduce_ms[n]:>10.4f}")
    print(f"{'batch':>8} {'kv':>8} {'decode attn':>12}")
    for b in (1, 16, 64, 256):
        for kv in (1024, 8192, 32768):
            j = kv // tp.g
            if b < g.decode_ms.shape[0] and j < g.decode_ms.shape[1]:
                print(f"{b:>8} {kv:>8} {g.decode_ms[b, j]:>12.4f}")
    print(f"{'kv':>8} {'chunk':>8} {'prefill attn':>12}")
    for kv in (0, 4096, 32768):
        for c in (512, 2048, 8192):
            j, ci = kv // tp.g, int(np.ceil(c / tp.gc))
            if j < g.prefill_ms.shape[0] and ci < g.prefill_ms.shape[1]:
                print(f"{kv:>8} {c:>8} {g.prefill_ms[j, ci]:>12.4f}")
    return 0
