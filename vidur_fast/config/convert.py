"""Plain data (dicts, lists, scalars from YAML/JSON) -> the frozen config dataclasses.

A union field (scheduler, router, workload, lengths, intervals) takes a member name
(``"sarathi"``) or a dict with a ``type`` key (``{"type": "sarathi", "chunk_size": 256}``); the
names are the CLI subcommand names, and class names (as config.json writes them) work too.
A dict of the same type as the current value merges over it; another type starts from that
member's defaults. Every error names the full field path.
"""

import dataclasses
import functools
import operator
import re
import types
import typing
from typing import Annotated, Any, Literal, get_args, get_origin

from vidur_fast.errors import ConfigError

TYPE_KEY = "type"


class NotApplicable(ConfigError):
    """A path names a field that the union member chosen at this point does not have.

    A sweep records the point with this error rather than failing the whole file.
    """


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """Field name -> annotated type of a config dataclass."""
    hints = typing.get_type_hints(cls, include_extras=True)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def union_members(tp: Any) -> dict[str, type] | None:
    """{member name: class} when tp is a union of dataclasses (tyro subcommands), else None."""
    if get_origin(tp) not in (typing.Union, types.UnionType):
        return None
    members = {}
    for arg in get_args(tp):
        name = None
        if get_origin(arg) is Annotated:
            arg, *meta = get_args(arg)
            name = next((m.name for m in meta if isinstance(getattr(m, "name", None), str)), None)
        if not dataclasses.is_dataclass(arg):
            return None
        members[name or arg.__name__] = arg
    return members


def _strip_optional(tp: Any) -> tuple[Any, bool]:
    if get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) < len(get_args(tp)):
            return functools.reduce(operator.or_, args), True
    return tp, False


def member_name(members: dict[str, type], obj: Any) -> str:
    return next(name for name, cls in members.items() if type(obj) is cls)


def _pick_member(members: dict[str, type], name: Any, path: str) -> tuple[str, type]:
    if isinstance(name, str):
        if name in members:
            return name, members[name]
        for key, cls in members.items():
            if cls.__name__ == name:
                return key, cls
    raise ConfigError(f"{path}: unknown type {name!r}; one of {', '.join(members)}")


def _default_of(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


def build_dataclass(cls: type, data: Any, path: str, current: Any = None) -> Any:
    """An instance of cls from a dict, merged over current (or over cls's defaults)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: must be a mapping of {cls.__name__} fields (got {data!r})")
    hints = field_types(cls)
    data = dict(data)
    tag = data.pop(TYPE_KEY, None)
    if tag is not None and tag != cls.__name__:
        raise ConfigError(f"{path}.type: {cls.__name__} is not a union (got {tag!r})")
    for key in data:
        if key not in hints:
            raise ConfigError(
                f"{path}.{key}: unknown field of {cls.__name__}; fields: {', '.join(hints)}"
            )
    kwargs = {}
    for f in dataclasses.fields(cls):
        sub = f"{path}.{f.name}" if path else f.name
        base = getattr(current, f.name) if current is not None else _default_of(f)
        if f.name in data:
            base = None if base is dataclasses.MISSING else base
            kwargs[f.name] = convert_value(hints[f.name], data[f.name], sub, base)
        elif base is dataclasses.MISSING:
            raise ConfigError(f"{sub}: required by {cls.__name__}")
        else:
            kwargs[f.name] = base
    return cls(**kwargs)


def convert_value(tp: Any, data: Any, path: str, current: Any = None) -> Any:
    """Check data against the annotated type tp and convert it; current is the value it
    replaces (merged into for dataclasses and same-type union members)."""
    if get_origin(tp) is Annotated:  # e.g. a field hidden from the command line
        tp = get_args(tp)[0]
    if get_origin(tp) is tuple and len(get_args(tp)) == 2 and get_args(tp)[1] is Ellipsis:
        if not isinstance(data, list | tuple):
            raise ConfigError(f"{path}: must be a list (got {data!r})")
        item = get_args(tp)[0]
        return tuple(convert_value(item, x, f"{path}[{k}]") for k, x in enumerate(data))
    members = union_members(tp)
    if members is not None:
        if isinstance(data, str):
            name, cls = _pick_member(members, data, path)
            if type(current) is cls:
                return current
            return build_dataclass(cls, {}, path)
        if isinstance(data, dict):
            tag = data.get(TYPE_KEY)
            if tag is None:
                if current is None:
                    raise ConfigError(f"{path}: needs a 'type': one of {', '.join(members)}")
                cls = type(current)
            else:
                _, cls = _pick_member(members, tag, path)
            body = {k: v for k, v in data.items() if k != TYPE_KEY}
            return build_dataclass(cls, body, path, current if type(current) is cls else None)
        raise ConfigError(f"{path}: a type name or a mapping with 'type' (got {data!r})")
    inner, optional = _strip_optional(tp)
    if data is None:
        if optional:
            return None
        raise ConfigError(f"{path}: may not be null")
    if inner is not tp:
        return convert_value(inner, data, path, current)
    if dataclasses.is_dataclass(tp):
        return build_dataclass(tp, data, path, current)
    return _scalar(tp, data, path)


def _scalar(tp: Any, data: Any, path: str) -> Any:
    if get_origin(tp) is Literal:
        if data not in get_args(tp):
            allowed = ", ".join(map(str, get_args(tp)))
            raise ConfigError(f"{path}: must be one of {allowed} (got {data!r})")
        return data
    if tp is bool:
        if not isinstance(data, bool):
            raise ConfigError(f"{path}: must be true or false (got {data!r})")
        return data
    if tp is int:
        if isinstance(data, bool) or not isinstance(data, int):
            raise ConfigError(f"{path}: must be an integer (got {data!r})")
        return data
    if tp is float:
        if isinstance(data, str):  # YAML reads 1e3 (no dot) as a string
            try:
                return float(data)
            except ValueError:
                pass
        if isinstance(data, bool) or not isinstance(data, int | float):
            raise ConfigError(f"{path}: must be a number (got {data!r})")
        return float(data)
    if tp is str:
        if not isinstance(data, str):
            raise ConfigError(f"{path}: must be a string (got {data!r})")
        return data
    return data


# ---- command-line text -> plain data ----


def parse_text(tp: Any, text: str, path: str) -> Any:
    """A command-line string as the plain value of a field annotated tp (None/none for an
    optional field, true/false for a bool); convert_value then checks it like any other."""
    inner, optional = _strip_optional(tp)
    if optional and text in ("None", "none"):
        return None
    try:
        if inner is bool:
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError
            return text.lower() in ("true", "1")
        if inner is int:
            return int(text)
        if inner is float:
            return float(text)
    except ValueError:
        raise ConfigError(f"{path}: cannot read {text!r} as {inner.__name__}") from None
    return text


# ---- paths ----


_INDEX = re.compile(r"\[(\d+)\]")


def split_path(path: str, where: str | None = None) -> list[str | int]:
    """A dotted field path as its parts, an item of a list field written `[k]` after it:
    "cluster.pools[1].num_replicas" -> ["cluster", "pools", 1, "num_replicas"]. An error
    names where (default: the path)."""
    parts: list[str | int] = []
    for piece in path.split("."):
        name, _, tail = piece.partition("[")
        parts.append(name)
        tail = "[" + tail if tail else ""
        while tail:
            m = _INDEX.match(tail)
            if m is None:
                raise ConfigError(
                    f"{where or path}: bad index in {piece!r}; write a list item as name[k]"
                )
            parts.append(int(m.group(1)))
            tail = tail[m.end() :]
    return parts


def _item_type(tp: Any) -> Any:
    """The item type of a tuple[X, ...] field (optional or annotated), else None."""
    if get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    tp, _ = _strip_optional(tp)
    if get_origin(tp) is tuple and len(get_args(tp)) == 2 and get_args(tp)[1] is Ellipsis:
        return get_args(tp)[0]
    return None


def check_path(cls: type, parts: list, path: str) -> None:
    """Raise ConfigError unless parts name a field reachable from cls through some member of
    every union on the way (an int part: an item of a list field)."""
    hints = field_types(cls)
    head, rest = parts[0], parts[1:]
    if not isinstance(head, str) or head not in hints:
        raise ConfigError(
            f"{path}: {head!r} is not a field of {cls.__name__}; fields: {', '.join(hints)}"
        )
    if not rest:
        return
    tp = hints[head]
    if isinstance(rest[0], int):
        item = _item_type(tp)
        if item is None:
            raise ConfigError(f"{path}: {head!r} is not a list")
        if len(rest) == 1:
            return
        if not dataclasses.is_dataclass(item):
            raise ConfigError(f"{path}: items of {head!r} have no sub-fields")
        return check_path(item, rest[1:], path)
    members = union_members(tp)
    if members is None:
        tp, _ = _strip_optional(tp)
        if not dataclasses.is_dataclass(tp):
            raise ConfigError(f"{path}: {head!r} has no sub-fields")
        return check_path(tp, rest, path)
    errors = []
    for member in members.values():
        try:
            return check_path(member, rest, path)
        except ConfigError as exc:
            errors.append(exc)
    raise ConfigError(f"{path}: no {head} type has a field {'.'.join(rest)!r}")


def set_path(obj: Any, parts: list, value: Any, path: str) -> Any:
    """A copy of the dataclass obj with the field at parts set from plain data value.

    Raises NotApplicable when a union member chosen in obj lacks the field.
    """
    hints = field_types(type(obj))
    head, rest = parts[0], parts[1:]
    if head not in hints:
        raise NotApplicable(
            f"{path}: {type(obj).__name__} has no field {head!r}; fields: {', '.join(hints)}"
        )
    current = getattr(obj, head)
    if rest and isinstance(rest[0], int):
        k, items = rest[0], tuple(current or ())
        if k >= len(items):
            raise NotApplicable(
                f"{path}: {head} has {len(items)} item{'s' if len(items) != 1 else ''}, no [{k}]"
            )
        item = items[k]
        if rest[1:]:
            if not dataclasses.is_dataclass(item):
                raise NotApplicable(f"{path}: {head}[{k}] is {item!r}, which has no sub-fields")
            new_item = set_path(item, rest[1:], value, path)
        else:
            new_item = convert_value(_item_type(hints[head]), value, path, item)
        new = items[:k] + (new_item,) + items[k + 1 :]
        return dataclasses.replace(obj, **{head: new})
    if rest:
        if not dataclasses.is_dataclass(current):
            raise NotApplicable(f"{path}: {head} is {current!r}, which has no sub-fields")
        new = set_path(current, rest, value, path)
    else:
        new = convert_value(hints[head], value, path, current)
    return dataclasses.replace(obj, **{head: new})


# ---- config -> plain data ----


def config_dict(cfg) -> dict:
    """The config as plain JSON-able data, each union member tagged with its type name."""

    def tag(obj):
        if hasattr(obj, "__dataclass_fields__"):
            d = {"type": type(obj).__name__}
            for k in obj.__dataclass_fields__:
                d[k] = tag(getattr(obj, k))
            return d
        if isinstance(obj, tuple | list):
            return [tag(x) for x in obj]
        return obj

    return tag(cfg)
