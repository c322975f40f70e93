"""Config files: a YAML or JSON mapping of SimConfig fields (a sweep's `base`, a run's
config.json) read through the one converter."""

import json
from pathlib import Path

import yaml

from vidur_fast.config.convert import build_dataclass
from vidur_fast.config.sim import SimConfig
from vidur_fast.errors import ConfigError


def read_mapping(path: str, what: str, holds: str = "SimConfig fields") -> dict:
    """Parse a YAML or JSON file whose top level must be a mapping of holds; errors start with
    what."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{what}: {path} is a directory, not a file")
    if not p.is_file():
        raise ConfigError(f"{what}: {path} does not exist")
    try:
        text = p.read_text()
        data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{what}: cannot read {path} ({type(exc).__name__})") from None
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        kind = p.suffix[1:] or "YAML"
        raise ConfigError(f"{what}: {path} is not valid {kind}: {first}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{what}: {path} must hold a mapping of {holds}")
    return data


def load_config(path: str) -> SimConfig:
    """The SimConfig a file describes (fields left out keep their defaults). A run directory
    stands for its config.json, so a run can be repeated with changes."""
    p = Path(path)
    if p.is_dir() and (p / "config.json").is_file():
        p = p / "config.json"
    return build_dataclass(SimConfig, read_mapping(str(p), "--config"), "")
