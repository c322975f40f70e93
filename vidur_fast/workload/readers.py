"""Trace readers: Vidur CSV, Mooncake JSONL and Azure LLM CSV (plain or gzip) -> TraceData.

Parsing is columnar (pandas / one json.loads per file; numpy alone for a CSV of plain numbers
and JSONL records of numbers, see _plain_csv and _record_numbers); the only per-row Python
work is turning JSON hash lists into one flat array. Every problem becomes a one-line
TraceError naming the file, the 1-based data row and the column.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import gzip
import io
import json
import math
import os
import re
import shutil
import stat
import tempfile
import warnings
import zlib
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from vidur_fast.errors import TraceError
from vidur_fast.kernels.dtypes import NO_ID
from vidur_fast.workload.columns import (
    RowLocator,
    check_sorted,
    checked_numbers,
    integer_column,
    lists_to_csr,
    numeric_column,
    parse_json_lists,
    require_columns,
)

if TYPE_CHECKING:
    import pandas as pd

FORMATS = ("vidur", "mooncake", "azure")
# (prompt column, output column) per format, for error messages about lengths.
TOKEN_COLUMNS = {
    "vidur": ("num_prefill_tokens", "num_decode_tokens"),
    "mooncake": ("input_length", "output_length"),
    "azure": ("ContextTokens", "GeneratedTokens"),
}
MOONCAKE_BLOCK_TOKENS = 512
_GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class BlockIds:
    """Per-request source block ids (CSR) at the trace's own block size."""

    offsets: np.ndarray
    """int64[n+1]"""
    ids: np.ndarray
    """int64[m]"""
    block_size: int
    """Tokens per source block."""
    covers_output: bool
    """True when ids run over prompt+output full blocks (Vidur), False for prompt-only."""


@dataclass(frozen=True)
class TraceData:
    """Validated trace columns in file order (lengths are raw floats, before any scaling)."""

    path: str
    format: str
    prompt_tokens: np.ndarray
    """float64[n] > 0"""
    decode_tokens: np.ndarray
    """float64[n] > 0"""
    arrival_s: np.ndarray | None
    """float64[n] >= 0, non-decreasing; None for length-only files."""
    session_id: np.ndarray | None
    """int64[n], NO_ID where absent; None when the file has no sessions."""
    block_ids: BlockIds | None
    """Only when hashes were asked for and the file has them."""
    row_index: np.ndarray
    """int64[n] 0-based data row of each entry."""

    def __len__(self) -> int:
        return self.prompt_tokens.shape[0]


def take_rows(data: TraceData, rows: np.ndarray) -> TraceData:
    """The trace restricted to rows (indices into its arrays, increasing)."""
    ids = data.block_ids
    if ids is not None:
        counts = np.diff(ids.offsets)[rows]
        offsets = np.zeros(rows.size + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        start = np.repeat(ids.offsets[rows] - offsets[:-1], counts)
        picked = ids.ids[start + np.arange(int(offsets[-1]), dtype=np.int64)]
        ids = dataclasses.replace(ids, offsets=offsets, ids=picked)
    return dataclasses.replace(
        data,
        prompt_tokens=data.prompt_tokens[rows],
        decode_tokens=data.decode_tokens[rows],
        arrival_s=None if data.arrival_s is None else data.arrival_s[rows],
        session_id=None if data.session_id is None else data.session_id[rows],
        block_ids=ids,
        row_index=data.row_index[rows],
    )


# ---- file access ----


def _is_gzip(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == _GZIP_MAGIC


def _check_exists(path: str) -> None:
    p = Path(path)
    if p.is_dir():
        raise TraceError(f"{path}: is a directory, not a trace file")
    if not p.exists():
        raise TraceError(f"{path}: file not found")
    if not p.is_file() and not _is_stream(path):
        raise TraceError(f"{path}: not a regular file, pipe or FIFO")


def _is_stream(path: str) -> bool:
    """A pipe, FIFO or character device (`<(zcat trace.csv.gz)`, /dev/stdin): readable once."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISSOCK(mode)


def _read_text(path: str) -> str:
    try:
        if _is_gzip(path):
            with gzip.open(path, "rt", encoding="utf-8") as f:
                return f.read()
        return Path(path).read_text(encoding="utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise TraceError(f"{path}: cannot read ({exc})") from None


def _first_line(path: str) -> str:
    try:
        opener = gzip.open if _is_gzip(path) else open
        with opener(path, "rt", encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    return line
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise TraceError(f"{path}: cannot read ({exc})") from None
    raise TraceError(f"{path}: empty file")


def detect_format(path: str) -> str:
    """vidur, mooncake or azure, from the file name, else from the first line."""
    _check_exists(path)
    name = path.lower().removesuffix(".gz")
    if name.endswith((".jsonl", ".json", ".ndjson")):
        return "mooncake"
    first = _first_line(path).lstrip()
    if first.startswith("{"):
        return "mooncake"
    columns = {c.strip().strip('"') for c in first.split(",")}
    if columns & {"TIMESTAMP", "ContextTokens", "GeneratedTokens"}:
        return "azure"
    return "vidur"


_FIELDS_RE = re.compile(r"Expected (\d+) fields in line (\d+), saw (\d+)")


def _read_csv(
    path: str, usecols: list[str] | None, max_rows: int | None, dtype: dict | None = None
) -> pd.DataFrame:
    """The columns usecols of a CSV trace. Every row is checked against the header: a row
    with more fields than the header has columns is an error naming the row (pandas would
    shift the row's values into other columns, or drop the surplus, without a word)."""
    import pandas as pd

    try:
        compression = "gzip" if _is_gzip(path) else None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            df = pd.read_csv(
                path, nrows=max_rows, dtype=dtype, compression=compression, index_col=False
            )
    except pd.errors.EmptyDataError:
        raise TraceError(f"{path}: empty file") from None
    except (pd.errors.ParserError, ValueError, OSError, EOFError, UnicodeDecodeError) as exc:
        detail = " ".join(str(exc).split())
        m = _FIELDS_RE.search(detail)
        if m:
            header, line, saw = m.groups()
            raise TraceError(
                f"{path}: row {int(line) - 1} (line {line}): {saw} fields but the header has "
                f"{header} columns; add the column to the header or remove the extra fields"
            ) from None
        raise TraceError(f"{path}: not a readable CSV ({detail})") from None
    if any(issubclass(w.category, pd.errors.ParserWarning) for w in caught):
        raise TraceError(
            f"{path}: row 1 (line 2): more fields than the header has columns; add the column "
            "to the header or remove the extra fields"
        )
    if usecols is not None:
        df = df[usecols]
    return df


# every byte a plain numeric CSV's data rows may hold (see _plain_csv)
_PLAIN_BYTES = b"0123456789.,\n"


def _plain_csv(path: str, max_rows: int | None) -> tuple[list[str], np.ndarray] | None:
    """(header names, data rows as a 2-D float64 array) of a CSV made of a header and rows of
    unsigned decimal numbers only (no quotes, signs, exponents, spaces, blank lines or empty
    fields), parsed by numpy without pandas (its import is most of a small run's start-up);
    None for any other file, which _read_csv then reads, with its row-exact errors. Both
    parsers read a decimal as the nearest double, so the values are the same."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
        if raw[:2] == _GZIP_MAGIC:
            raw = gzip.decompress(raw)
    except (OSError, EOFError, zlib.error):
        return None
    head, sep, body = raw.partition(b"\n")
    if not sep or not body or body.translate(None, _PLAIN_BYTES) or b"\n\n" in body:
        return None
    if b'"' in head or b"\r" in head or head.startswith(b"\xef\xbb\xbf"):
        return None
    try:
        names = head.decode("utf-8").split(",")
    except UnicodeDecodeError:
        return None
    if any(not n.strip() for n in names) or len({n.strip() for n in names}) < len(names):
        return None  # unnamed or repeated columns: the pandas reader's errors
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no data rows: a warning, not an empty array
            rows = np.loadtxt(
                io.StringIO(body.decode("ascii")),
                delimiter=",",
                dtype=np.float64,
                comments=None,
                ndmin=2,
                max_rows=max_rows,
            )
    except (ValueError, UserWarning):
        return None
    if rows.shape[0] == 0 or rows.shape[1] != len(names):
        return None
    return names, rows


def _csv_columns(path: str) -> list[str]:
    """The header's column names as written; a name given twice is an error (pandas would
    rename the second one and the reader would use the first without a word)."""
    try:
        names = next(csv.reader(io.StringIO(_first_line(path))))
    except (csv.Error, StopIteration):
        raise TraceError(f"{path}: not a readable CSV header") from None
    seen: dict[str, int] = {}
    for i, raw in enumerate(names):
        name = raw.strip()
        if name and name in seen:
            raise TraceError(
                f"{path}: column {name!r} appears twice in the header (columns {seen[name] + 1} "
                f"and {i + 1}); keep one"
            )
        seen[name] = i
    return [str(c) for c in _read_csv_header(path)]


def _read_csv_header(path: str) -> list[str]:
    import pandas as pd

    try:
        compression = "gzip" if _is_gzip(path) else None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return list(pd.read_csv(path, nrows=0, compression=compression).columns)
    except pd.errors.EmptyDataError:
        raise TraceError(f"{path}: empty file") from None
    except (pd.errors.ParserError, ValueError, OSError, EOFError, UnicodeDecodeError) as exc:
        detail = " ".join(str(exc).split())
        raise TraceError(f"{path}: not a readable CSV ({detail})") from None


def _require_rows(frame_len: int, loc: RowLocator) -> None:
    if frame_len == 0:
        raise loc.file_error("no data rows")


# ---- shared checks ----


def _session_column(series: pd.Series, loc: RowLocator) -> np.ndarray:
    # Empty cells mean "no session"; present values must be whole numbers >= 0 (or -1).
    missing = series.isna().to_numpy()
    filled = series.where(~series.isna(), NO_ID)
    values = numeric_column(filled, "session_id", loc, must_be=None)
    ids = integer_column(values, "session_id", loc)
    bad = np.flatnonzero(ids < NO_ID)
    if bad.size:
        raise loc.error(int(bad[0]), "session_id", f"must be >= 0 or -1 (got {ids[bad[0]]})")
    ids[missing] = NO_ID
    return ids


def _check_block_counts(
    counts: np.ndarray,
    low: np.ndarray,
    high: np.ndarray | None,
    column: str,
    rule: str,
    loc: RowLocator,
) -> None:
    too_few = np.flatnonzero(counts < low)
    if too_few.size:
        i = int(too_few[0])
        raise loc.error(i, column, f"{counts[i]} ids but {rule} needs {low[i]}")
    if high is not None:
        too_many = np.flatnonzero(counts > high)
        if too_many.size:
            i = int(too_many[0])
            raise loc.error(i, column, f"{counts[i]} ids but {rule} allows at most {high[i]}")


# ---- Vidur CSV ----


def _read_vidur(
    path: str, need_arrivals: bool, need_hashes: bool, max_rows: int | None
) -> TraceData:
    loc = RowLocator(path)
    plain = _plain_csv(path, max_rows)
    columns = _csv_columns(path) if plain is None else plain[0]
    required = (["arrived_at"] if need_arrivals else []) + [
        "num_prefill_tokens",
        "num_decode_tokens",
    ]
    require_columns(columns, required, loc, "vidur")
    with_hashes = need_hashes and "block_hash_ids" in columns
    if with_hashes and "block_size" not in columns:
        raise loc.file_error("missing column block_size (needed with block_hash_ids)")
    optional = ["session_id"] if "session_id" in columns else []
    optional += ["block_hash_ids", "block_size"] if with_hashes else []
    if plain is not None and not optional:  # numbers only: no pandas
        names, rows = plain

        def col(name: str, must_be: str = "> 0") -> np.ndarray:
            values = np.ascontiguousarray(rows[:, names.index(name)])
            return checked_numbers(values, name, loc, must_be=must_be)

        prompt, decode = col("num_prefill_tokens"), col("num_decode_tokens")
        arrival = None
        if need_arrivals:
            arrival = col("arrived_at", must_be=">= 0")
            check_sorted(arrival, "arrived_at", loc)
        return TraceData(path, "vidur", prompt, decode, arrival, None, None, np.arange(len(rows)))
    df = _read_csv(path, required + optional, max_rows, dtype={"block_hash_ids": str})
    _require_rows(len(df), loc)

    prompt = numeric_column(df["num_prefill_tokens"], "num_prefill_tokens", loc)
    decode = numeric_column(df["num_decode_tokens"], "num_decode_tokens", loc)
    arrival = None
    if need_arrivals:
        raw = numeric_column(df["arrived_at"], "arrived_at", loc, must_be=">= 0")
        check_sorted(raw, "arrived_at", loc)
        arrival = raw
    sessions = _session_column(df["session_id"], loc) if "session_id" in df else None
    block_ids = _vidur_block_ids(df, prompt, decode, loc) if with_hashes else None
    return TraceData(
        path, "vidur", prompt, decode, arrival, sessions, block_ids, np.arange(len(df))
    )


def _vidur_block_ids(
    df: pd.DataFrame, prompt: np.ndarray, decode: np.ndarray, loc: RowLocator
) -> BlockIds:
    sizes = numeric_column(df["block_size"], "block_size", loc)
    sizes = integer_column(sizes, "block_size", loc)
    differs = np.flatnonzero(sizes != sizes[0])
    if differs.size:
        i = int(differs[0])
        raise loc.error(
            i, "block_size", f"block_size mismatch: {sizes[i]} here but {sizes[0]} in row 1"
        )
    block = int(sizes[0])
    lists = parse_json_lists(df["block_hash_ids"].to_numpy(dtype=object), "block_hash_ids", loc)
    offsets, ids = lists_to_csr(lists, "block_hash_ids", loc)
    p, d = np.floor(prompt).astype(np.int64), np.floor(decode).astype(np.int64)
    rule = f"one id per full {block}-token block of prompt+output (every prompt block)"
    _check_block_counts(np.diff(offsets), p // block, (p + d) // block, "block_hash_ids", rule, loc)
    return BlockIds(offsets, ids, block, covers_output=True)


# ---- Mooncake JSONL ----


def _record_numbers(records: list, key: str) -> np.ndarray | None:
    """float64 of every record's `key` when each has it as a finite JSON number (an integer
    within 2**53, or a float), the values the pandas reader gets; None otherwise (a field
    missing or of another type: the pandas reader names the row and the problem)."""
    values = [r.get(key) for r in records]
    for v in values:
        if type(v) is int:
            if not -(2**53) <= v <= 2**53:
                return None
        elif type(v) is not float or not math.isfinite(v):
            return None
    return np.array(values, dtype=np.float64)


def _read_mooncake(
    path: str, need_arrivals: bool, need_hashes: bool, max_rows: int | None
) -> TraceData:
    lines = _read_text(path).splitlines()
    line_no = np.flatnonzero([bool(s.strip()) for s in lines]) + 1
    if max_rows is not None:
        line_no = line_no[:max_rows]
    loc = RowLocator(path, line_no)
    if line_no.size == 0:
        raise loc.file_error("empty file")
    kept = [lines[i - 1] for i in line_no]
    try:
        records = json.loads("[" + ",".join(kept) + "]", object_pairs_hook=_unique_keys)
    except json.JSONDecodeError:
        records = None
    except _DuplicateKey:
        _raise_duplicate_key(kept, loc)
    if records is None or len(records) != len(kept):
        _raise_bad_json_line(kept, loc)
    not_object = np.flatnonzero([type(r) is not dict for r in records])
    if not_object.size:
        raise loc.error(int(not_object[0]), "-", "each line must be a JSON object")
    required = (["timestamp"] if need_arrivals else []) + ["input_length", "output_length"]
    numbers = {key: _record_numbers(records, key) for key in required}
    with_hashes = need_hashes and any("hash_ids" in r for r in records)
    if all(v is not None for v in numbers.values()) and (
        not with_hashes or all("hash_ids" in r for r in records)
    ):  # every record has every field, numbers as numbers: no pandas
        prompt = checked_numbers(numbers["input_length"], "input_length", loc)
        decode = checked_numbers(numbers["output_length"], "output_length", loc)
        if need_arrivals:
            ms = checked_numbers(numbers["timestamp"], "timestamp", loc, must_be=">= 0")
        hash_lists = [r["hash_ids"] for r in records] if with_hashes else None
    else:
        import pandas as pd

        df = pd.DataFrame.from_records(records)
        require_columns(list(df.columns), required, loc, "mooncake")
        prompt = numeric_column(df["input_length"], "input_length", loc)
        decode = numeric_column(df["output_length"], "output_length", loc)
        if need_arrivals:
            ms = numeric_column(df["timestamp"], "timestamp", loc, must_be=">= 0")
        hash_lists = df["hash_ids"].to_numpy(dtype=object) if with_hashes else None
    arrival = None
    if need_arrivals:
        check_sorted(ms, "timestamp", loc)
        arrival = ms / 1000.0
    block_ids = None
    if hash_lists is not None:  # like Vidur's block_hash_ids: optional
        offsets, ids = lists_to_csr(hash_lists, "hash_ids", loc)
        p = np.floor(prompt).astype(np.int64)
        low = -(-p // MOONCAKE_BLOCK_TOKENS)
        rule = f"one id per {MOONCAKE_BLOCK_TOKENS}-token prompt block (last may be partial)"
        _check_block_counts(np.diff(offsets), low, None, "hash_ids", rule, loc)
        block_ids = BlockIds(offsets, ids, MOONCAKE_BLOCK_TOKENS, covers_output=False)
    return TraceData(path, "mooncake", prompt, decode, arrival, None, block_ids, line_no - 1)


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list) -> dict:
    """A JSON object as a dict; a key given twice raises (json would keep the last one)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return out


def _raise_duplicate_key(lines: list[str], loc: RowLocator) -> None:
    for i, line in enumerate(lines):
        try:
            json.loads(line, object_pairs_hook=_unique_keys)
        except _DuplicateKey as exc:
            raise loc.error(i, str(exc), "key given twice in this line; keep one") from None
        except json.JSONDecodeError:
            continue
    raise loc.file_error("a key given twice in one line")


def _raise_bad_json_line(lines: list[str], loc: RowLocator) -> None:
    for i, line in enumerate(lines):
        try:
            json.loads(line)
        except json.JSONDecodeError as exc:
            raise loc.error(i, "-", f"malformed JSON ({exc.msg} at char {exc.pos})") from None
    raise loc.file_error("malformed JSON lines")


# ---- Azure LLM inference CSV ----


def _read_azure(path: str, need_arrivals: bool, max_rows: int | None) -> TraceData:
    import pandas as pd

    loc = RowLocator(path)
    columns = _csv_columns(path)
    required = (["TIMESTAMP"] if need_arrivals else []) + ["ContextTokens", "GeneratedTokens"]
    require_columns(columns, required, loc, "azure")
    df = _read_csv(path, required, max_rows, dtype={"TIMESTAMP": str})
    _require_rows(len(df), loc)
    prompt = numeric_column(df["ContextTokens"], "ContextTokens", loc)
    decode = numeric_column(df["GeneratedTokens"], "GeneratedTokens", loc)
    arrival = None
    if need_arrivals:
        stamps = pd.to_datetime(df["TIMESTAMP"], format="ISO8601", errors="coerce")
        bad = np.flatnonzero(stamps.isna().to_numpy())
        if bad.size:
            i = int(bad[0])
            raise loc.error(
                i,
                "TIMESTAMP",
                f"not a datetime like 2023-11-16 18:15:46.68 (got {df['TIMESTAMP'].iloc[i]!r})",
            )
        ns = stamps.to_numpy(dtype="datetime64[ns]").astype(np.int64)
        arrival = (ns - ns[0]) / 1e9  # seconds since the first row
        check_sorted(arrival, "TIMESTAMP", loc)
    return TraceData(path, "azure", prompt, decode, arrival, None, None, np.arange(len(df)))


# ---- entry point ----


def read_trace(
    path: str | Path,
    fmt: str = "auto",
    *,
    need_arrivals: bool = True,
    need_hashes: bool = False,
    max_rows: int | None = None,
) -> TraceData:
    """Read and validate a trace file; only the first max_rows data rows when given.

    Inside `with trace_memo(m):` a file read before with the same arguments, and unchanged
    since (size, mtime, inode), is answered from m with the same read-only arrays.
    """
    path = str(path)
    memo = _MEMO[0]
    key = _memo_key(path, fmt, need_arrivals, need_hashes, max_rows) if memo is not None else None
    if key is not None:
        found = memo.get(key)
        if found is not None:
            return found
        data = _frozen(_read_trace(path, fmt, need_arrivals, need_hashes, max_rows))
        memo[key] = data
        return data
    return _read_trace(path, fmt, need_arrivals, need_hashes, max_rows)


# the memo read_trace uses, set by trace_memo (one slot, so the module holds no data itself)
_MEMO: list[MutableMapping | None] = [None]


@contextlib.contextmanager
def trace_memo(memo: MutableMapping) -> Iterator[None]:
    """Within the block, read_trace keeps what it reads in memo and answers repeated reads of
    an unchanged file from it: a process that runs many simulations over one trace (a sweep
    worker) parses it once."""
    previous = _MEMO[0]
    _MEMO[0] = memo
    try:
        yield
    finally:
        _MEMO[0] = previous


def _memo_key(path: str, fmt: str, *args) -> tuple | None:
    """What a memoized read depends on; None for anything but a regular file (a pipe can be
    read once only, and is copied instead)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    real = os.path.realpath(path)
    return (path, real, st.st_size, st.st_mtime_ns, st.st_ino, fmt, *args)


def _frozen(data: TraceData) -> TraceData:
    """data with every array read-only (it is shared by every later read of the memo)."""
    for f in dataclasses.fields(data):
        value = getattr(data, f.name)
        if isinstance(value, np.ndarray):
            value.flags.writeable = False
    if data.block_ids is not None:
        data.block_ids.offsets.flags.writeable = False
        data.block_ids.ids.flags.writeable = False
    return data


def _read_trace(
    path: str, fmt: str, need_arrivals: bool, need_hashes: bool, max_rows: int | None
) -> TraceData:
    _check_exists(path)
    if _is_stream(path):
        return _read_stream(path, fmt, need_arrivals, need_hashes, max_rows)
    if fmt == "auto":
        fmt = detect_format(path)
    if fmt == "vidur":
        return _read_vidur(path, need_arrivals, need_hashes, max_rows)
    if fmt == "mooncake":
        return _read_mooncake(path, need_arrivals, need_hashes, max_rows)
    if fmt == "azure":
        return _read_azure(path, need_arrivals, max_rows)
    raise TraceError(f"{path}: unknown trace format {fmt!r} (allowed: auto, {', '.join(FORMATS)})")


def _read_stream(
    path: str, fmt: str, need_arrivals: bool, need_hashes: bool, max_rows: int | None
) -> TraceData:
    """A pipe or FIFO can be read once only: copy it to a temporary file, read that, and name
    the pipe (not the copy) in the data and in every error."""
    fd, tmp = tempfile.mkstemp(prefix="vidur-fast-trace.", suffix=Path(path).suffix)
    try:
        with os.fdopen(fd, "wb") as out, open(path, "rb") as src:
            shutil.copyfileobj(src, out, 1 << 20)
        if fmt == "auto" and not Path(path).suffix:  # `<(...)` has no name to go by
            fmt = detect_format(tmp)
        try:
            data = _read_trace(tmp, fmt, need_arrivals, need_hashes, max_rows)
        except TraceError as exc:
            raise TraceError(str(exc).replace(tmp, path)) from None
        return dataclasses.replace(data, path=path)
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({exc.strerror or exc})") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
