"""`vidur-fast profiles` actions: list catalogs and sources, build grids, show op times."""

from dataclasses import dataclass, field
from typing import Annotated

import numpy as np
import tyro

from vidur_fast.catalog import (
    default_node_for,
    get_device,
    get_model,
    get_node,
    list_devices,
    list_models,
    list_nodes,
)
from vidur_fast.commands.errors import parse_args_or_raise
from vidur_fast.commands.model_info import ProfilesModel, profiles_model
from vidur_fast.config.predictor import PredictorConfig
from vidur_fast.config.sim import ClusterConfig
from vidur_fast.errors import ConfigError


@dataclass(frozen=True)
class ProfilesBuild:
    """Fit the operator models and build (or refresh) the cached timing grids."""

    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    """Model, device, node, TP and PP (replicas and memory margin do not matter here)."""
    predictor: PredictorConfig = field(default_factory=PredictorConfig)


@dataclass(frozen=True)
class ProfilesShow(ProfilesBuild):
    """Print per-layer operator times (ms) for a configuration at a few batch shapes."""

    plot: str | None = None
    """Also write a PNG of the token, decode and prefill grids to this path."""


def _wrapped(head: str, items, indent: int = 9) -> str:
    import textwrap

    first = head.ljust(indent) if len(head) < indent else head + " "
    return textwrap.fill(
        ", ".join(items),
        79,
        initial_indent=first,
        subsequent_indent=" " * indent,
        break_on_hyphens=False,
        break_long_words=False,
    )


def _summary(value) -> list[str]:
    """A source's listing entry as short items: names, with their variants in brackets."""
    if isinstance(value, dict):
        out = []
        for k, v in value.items():
            if isinstance(v, list | tuple) and v:
                out.append(f"{k} ({', '.join(map(str, v))})")
            elif isinstance(v, str):
                out.append(f"{k} ({v})")
            else:
                out.append(str(k))
        return out
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    return [str(value)]


def format_source(src: str, info: dict) -> list[str]:
    """What a timing source holds, a few wrapped lines (its install path left out)."""
    lines = [f"source {src}" + (f" ({info['package']})" if "package" in info else "") + ":"]
    for key, value in info.items():
        if key in ("root", "package"):
            continue
        lines.append(_wrapped(f"  {key}:", _summary(value), 12))
    return lines


def profiles_list(profile_dir: str | None) -> int:
    from vidur_fast.timing.sources import SOURCES, available

    print(_wrapped("models:", list_models()))
    print(_wrapped("devices:", list_devices()))
    print(_wrapped("nodes:", list_nodes()))
    for src in SOURCES:
        if src == "vidur" and profile_dir is None:
            print("source vidur: pass --profile-dir DIR (a Vidur data/profiling layout)")
            continue
        info = available(src, profile_dir if src == "vidur" else None)
        print("\n".join(format_source(src, info)))
    return 0


def _load(args: ProfilesBuild):
    from vidur_fast.config.validate import validate_predictor
    from vidur_fast.timing.build import build_timing

    c = args.cluster
    validate_predictor(args.predictor)
    model = get_model(c.model)
    device = get_device(c.device)
    node = get_node(c.node or default_node_for(device.name))
    model.check_parallelism(c.tp, c.pp)
    return model, build_timing(model, device, node, c.tp, c.pp, args.predictor, progress=True)


def profiles_build(args) -> int:
    _, timing = _load(args)
    meta = timing.meta
    print(
        f"grids ready: source {meta.get('source')}, key {meta.get('key')}, "
        f"from cache {meta.get('from_cache')}, at {meta.get('cache_path')}"
    )
    return 0


def profiles_show(args) -> int:
    if args.plot is not None:  # before the build: a path that cannot be written fails now
        from vidur_fast.outputs.writer import check_output_file

        check_output_file(args.plot, "--plot")
    model, timing = _load(args)
    g, tp = timing.grids, timing.params
    c = args.cluster
    print(f"per-layer times (ms), {c.model} on {c.device} TP{c.tp} PP{c.pp}")
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
    if model.moe is not None:
        from vidur_fast.commands.moe_info import moe_lines

        cl = args.cluster
        device = get_device(cl.device)
        node = get_node(cl.node or default_node_for(device.name))
        for line in moe_lines(model, device, node, cl.tp, cl.pp, args.predictor, g.allreduce_ms):
            print(line)
    if args.plot:
        _plot_grids(timing, args.plot, f"{args.cluster.model} on {args.cluster.device}")
        print(f"plot: {args.plot}")
    return 0


def _plot_grids(timing, path: str, title: str) -> None:
    """Token-op, decode and prefill attention times against their main feature."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    g, tp = timing.grids, timing.params
    fig, ax = plt.subplots(1, 3, figsize=(14, 4))
    n = np.arange(1, g.tok_ms.shape[0])
    ax[0].loglog(n, g.tok_ms[1:], label="linear + norm")
    if g.allreduce_ms.any():  # zero without tensor parallelism
        ax[0].loglog(n, g.allreduce_ms[1:], label="all-reduce")
    ax[0].set(xlabel="tokens in batch", ylabel="ms per layer", title="token ops")
    kv = np.arange(g.decode_ms.shape[1]) * tp.g
    for b in (1, 8, 64, 256):
        if b < g.decode_ms.shape[0]:
            ax[1].plot(kv, g.decode_ms[b], label=f"batch {b}")
    ax[1].set(xlabel="mean kv tokens", ylabel="ms per layer", title="decode attention")
    chunks = np.arange(g.prefill_ms.shape[1]) * tp.gc
    for kv_t in (0, 8192, 32768):
        j = kv_t // tp.g
        if j < g.prefill_ms.shape[0]:
            ax[2].plot(chunks, g.prefill_ms[j], label=f"kv {kv_t}")
    ax[2].set(xlabel="equivalent chunk tokens", ylabel="ms per layer", title="prefill attention")
    for a in ax:
        a.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=90)
    except OSError as exc:
        raise ConfigError(f"--plot: cannot write {path} ({exc.strerror or exc})") from None
    finally:
        plt.close(fig)


@dataclass(frozen=True)
class ProfilesList:
    """List the models, devices, nodes and timing sources available."""

    profile_dir: str | None = None
    """A Vidur-layout profile directory to inspect as well."""


def cmd_profiles(argv: list[str]) -> int:
    sub = parse_args_or_raise(
        lambda: tyro.cli(
            Annotated[ProfilesList, tyro.conf.subcommand("list")]
            | Annotated[ProfilesBuild, tyro.conf.subcommand("build")]
            | Annotated[ProfilesShow, tyro.conf.subcommand("show")]
            | Annotated[ProfilesModel, tyro.conf.subcommand("model")],
            args=argv,
            prog="vidur-fast profiles",
        ),
        "vidur-fast profiles",
    )
    if isinstance(sub, ProfilesList):
        return profiles_list(sub.profile_dir)
    if isinstance(sub, ProfilesShow):
        return profiles_show(sub)
    if isinstance(sub, ProfilesModel):
        return profiles_model(sub)
    return profiles_build(sub)
