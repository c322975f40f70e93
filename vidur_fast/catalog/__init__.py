"""Model, device and node catalogs."""

from vidur_fast.catalog.hardware import (
    DeviceSpec,
    NodeSpec,
    default_node_for,
    get_device,
    get_node,
    list_devices,
    list_nodes,
)
from vidur_fast.catalog.models import ModelSpec, get_model, list_models

__all__ = [
    "DeviceSpec",
    "ModelSpec",
    "NodeSpec",
    "default_node_for",
    "get_device",
    "get_model",
    "get_node",
    "list_devices",
    "list_models",
    "list_nodes",
]
