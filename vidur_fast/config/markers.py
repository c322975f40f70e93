"""The command line's markers on config fields, without importing tyro.

The config dataclasses name their union members (the CLI subcommands, which config files and
config.json use too) and hide fields from the command line with these markers. tyro's own
markers would import tyro with the config (~50 ms of CPU), which a run from Python never
uses; `use_tyro_markers()` swaps these for tyro's in the annotations of the config classes
before the command line is parsed.
"""

import dataclasses
import functools
import operator
import sys
import types
import typing
from typing import Annotated, Any, get_args, get_origin


@dataclasses.dataclass(frozen=True)
class Subcommand:
    """Annotated[Member, Subcommand("name")]: the member's name in a union of dataclasses."""

    name: str


class _Hidden:
    def __repr__(self) -> str:
        return "Suppress"


HIDDEN = _Hidden()


class Suppress:
    """Suppress[T]: a field that config files set and the command line does not show."""

    def __class_getitem__(cls, tp):
        return Annotated[tp, HIDDEN]


def _tyro_marker(m: Any) -> Any:
    import tyro

    if isinstance(m, Subcommand):
        return tyro.conf.subcommand(m.name)
    if m is HIDDEN:
        return get_args(tyro.conf.Suppress[int])[1]
    return m


def tyro_type(tp: Any) -> Any:
    """tp with this module's markers replaced by tyro's (tp itself when it has none)."""
    origin = get_origin(tp)
    if origin is Annotated:
        inner, *meta = get_args(tp)
        new_inner, new_meta = tyro_type(inner), [_tyro_marker(m) for m in meta]
        if new_inner is inner and all(a is b for a, b in zip(new_meta, meta, strict=True)):
            return tp
        return Annotated[(new_inner, *new_meta)]
    if origin in (typing.Union, types.UnionType):
        args = get_args(tp)
        new = tuple(tyro_type(a) for a in args)
        if all(a is b for a, b in zip(new, args, strict=True)):
            return tp
        return functools.reduce(operator.or_, new)
    return tp


def _use_in_class(cls: type) -> None:
    annotations = cls.__dict__.get("__annotations__", {})
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name, tp in list(annotations.items()):
        new = tyro_type(tp)
        if new is not tp:
            annotations[name] = new
            if name in fields:
                fields[name].type = new


_done: set[type] = set()


def use_tyro_markers() -> None:
    """Replace the markers by tyro's in every dataclass of the loaded vidur_fast modules (call
    before tyro.cli; classes already done are skipped)."""
    for mod_name, mod in list(sys.modules.items()):
        if mod is None or not (mod_name == "vidur_fast" or mod_name.startswith("vidur_fast.")):
            continue
        for obj in list(vars(mod).values()):
            if isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj not in _done:
                _use_in_class(obj)
                _done.add(obj)
