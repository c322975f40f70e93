"""Config files: a YAML or JSON mapping of SimConfig fields (a sweep's `base`, a run's
config.json) read through the one converter."""

import json
from pathlib import Path

import yaml

from vidur_fast.config.convert import build_dataclass
from vidur_fast.config.sim import SimConfig
from vidur_fast.errors import ConfigError


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (YAML itself would keep
    the last one without a word)."""


def _construct_unique_mapping(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            repeated = key in seen
        except TypeError:  # an unhashable key: the mapping constructor reports it
            continue
        if repeated:
            line = key_node.start_mark.line + 1
            raise _DuplicateKey(f"key {key!r} given twice (line {line})")
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


class _DuplicateKey(ValueError):
    pass


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping
)


def _unique_pairs(pairs):
    out = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(f"key {key!r} given twice")
        out[key] = value
    return out


def _decode(raw: bytes) -> str:
    """Text of a config file: UTF-8 (with or without a byte-order mark) or UTF-16 with its
    byte-order mark (what Windows PowerShell's `>` writes)."""
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        return raw.decode("utf-16")
    return raw.decode("utf-8-sig")


def read_mapping(path: str, what: str, holds: str = "SimConfig fields") -> dict:
    """Parse a YAML or JSON file whose top level must be a mapping of holds; errors start with
    what."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{what}: {path} is a directory, not a file")
    if not p.is_file():
        raise ConfigError(f"{what}: {path} does not exist")
    try:
        text = _decode(p.read_bytes())
        if p.suffix == ".json":
            data = json.loads(text, object_pairs_hook=_unique_pairs)
        else:
            data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a safe loader)
    except OSError as exc:
        raise ConfigError(f"{what}: cannot read {path} ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ConfigError(
            f"{what}: cannot read {path}: not UTF-8 or UTF-16 text; save it as UTF-8"
        ) from None
    except _DuplicateKey as exc:
        raise ConfigError(f"{what}: {path}: {exc}; give each key once") from None
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
