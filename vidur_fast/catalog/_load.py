"""Read the JSON catalogs shipped in `vidur_fast.profiles`."""

import json
from functools import cache
from importlib import resources


@cache
def load_catalog(kind: str) -> dict[str, dict]:
    """All entries of one catalog kind ('models', 'devices', 'nodes') keyed by name."""
    out: dict[str, dict] = {}
    root = resources.files("vidur_fast.profiles").joinpath(kind)
    for entry in sorted(root.iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".json"):
            data = json.loads(entry.read_text())
            out[data["name"]] = data
    return out
