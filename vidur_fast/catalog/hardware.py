"""Device and node catalogs."""

import difflib
from dataclasses import dataclass

from vidur_fast.catalog._load import load_catalog
from vidur_fast.errors import ConfigError


@dataclass(frozen=True)
class DeviceSpec:
    name: str
    memory_gb: float
    """Memory the planner uses, times 1024^3 bytes."""
    peak_bf16_tflops: float
    peak_fp8_tflops: float
    hbm_bandwidth_gbps: float
    price_per_hour_usd: float
    peak_fp32_tflops: float = 0.0
    """Dense FP32 (CUDA-core, non-tensor) peak; 0 = not stated."""
    aiconfigurator_system: str | None = None
    description: str = ""

    @property
    def memory_bytes(self) -> float:
        return self.memory_gb * 1024**3


@dataclass(frozen=True)
class NodeSpec:
    name: str
    device: str
    gpus_per_node: int
    nvlink_bandwidth_gbps: float
    """Per GPU, one direction."""
    inter_node_bandwidth_gbps: float
    pcie_bandwidth_gbps: float
    pairwise_nvlink: bool
    p2p_latency_us: float
    description: str = ""


def list_devices() -> list[str]:
    return list(load_catalog("devices"))


def list_nodes() -> list[str]:
    return list(load_catalog("nodes"))


def _entry(kind: str, name: str, field: str) -> dict:
    """A catalog entry by name, case-insensitively; an unknown name names the closest ones."""
    cat = load_catalog(kind)
    if name in cat:
        return cat[name]
    by_lower = {k.lower(): k for k in cat}
    if str(name).lower() in by_lower:
        return cat[by_lower[str(name).lower()]]
    close = difflib.get_close_matches(str(name).lower(), list(by_lower), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(by_lower[c] for c in close)}?" if close else ""
    raise ConfigError(f"{field}: unknown {kind[:-1]} {name!r}{hint} available: {', '.join(cat)}")


def get_device(name: str) -> DeviceSpec:
    return DeviceSpec(**_entry("devices", name, "cluster.device"))


def get_node(name: str) -> NodeSpec:
    return NodeSpec(**_entry("nodes", name, "cluster.node"))


def default_node_for(device: str) -> str:
    """The node type a device is usually deployed in (DGX-style where one exists)."""
    for name, data in load_catalog("nodes").items():
        if data["device"] == device and name.endswith("_dgx"):
            return name
    for name, data in load_catalog("nodes").items():
        if data["device"] == device:
            return name
    return "h100_dgx"
