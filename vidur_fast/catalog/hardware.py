"""Device and node catalogs."""

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


def get_device(name: str) -> DeviceSpec:
    cat = load_catalog("devices")
    if name not in cat:
        raise ConfigError(f"cluster.device: unknown device {name!r}; available: {', '.join(cat)}")
    return DeviceSpec(**cat[name])


def get_node(name: str) -> NodeSpec:
    cat = load_catalog("nodes")
    if name not in cat:
        raise ConfigError(f"cluster.node: unknown node {name!r}; available: {', '.join(cat)}")
    return NodeSpec(**cat[name])


def default_node_for(device: str) -> str:
    """The node type a device is usually deployed in (DGX-style where one exists)."""
    for name, data in load_catalog("nodes").items():
        if data["device"] == device and name.endswith("_dgx"):
            return name
    for name, data in load_catalog("nodes").items():
        if data["device"] == device:
            return name
    return "h100_dgx"
