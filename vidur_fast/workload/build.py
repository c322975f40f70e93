"""build_workload: workload config + seed -> RequestTable."""

import numpy as np

from vidur_fast.config.validate_workload import (
    MAX_REQUEST_TOKENS,
    validate_build_args,
    validate_workload,
)
from vidur_fast.config.workload import (
    ClosedLoopWorkload,
    SyntheticWorkload,
    TraceLengths,
    TraceWorkload,
)
from vidur_fast.errors import ConfigError, TraceError
from vidur_fast.workload.clipping import clip_prompt, clip_proportional, first_over
from vidur_fast.workload.columns import RowLocator
from vidur_fast.workload.generators import (
    Stream,
    draw_arrivals,
    draw_lengths,
    rng_for,
    scale_tokens,
    trace_length_rows,
)
from vidur_fast.workload.hashes import derive_block_hashes, fit_block_hashes, gather_rows
from vidur_fast.workload.readers import TOKEN_COLUMNS, TraceData, read_trace, take_rows
from vidur_fast.workload.table import RequestTable, make_table


def build_workload(
    cfg: SyntheticWorkload | TraceWorkload | ClosedLoopWorkload,
    seed: int,
    *,
    block_size: int = 16,
    need_hashes: bool = False,
    where: str = "workload",
) -> RequestTable:
    """Generate or read the requests of one run, sorted by arrival.

    block_size: the engine's KV block size; trace block ids are mapped onto it.
    need_hashes: read prefix-block ids (costs time on big traces); when False, or when the
        workload has none, the table has no hashes (hash_block_size == 0).
    where: field path of cfg in the enclosing config, used in error messages.
    Same cfg and seed give identical arrays, in one process or two.
    """
    validate_build_args(seed, block_size)
    validate_workload(cfg, where)
    if isinstance(cfg, ClosedLoopWorkload):
        # arrivals are decided during the run; see workload.closed_loop for the plan
        from vidur_fast.workload.closed_loop import build_closed_loop

        return build_closed_loop(cfg, seed, where, block_size)[0]
    if isinstance(cfg, SyntheticWorkload):
        if isinstance(cfg.lengths, TraceLengths):
            return _build_synthetic_trace_lengths(cfg, seed, block_size, need_hashes, where)
        return _build_synthetic(cfg, seed, where)
    return _build_trace(cfg, block_size, need_hashes, where)


# ---- synthetic ----


def _build_synthetic(cfg: SyntheticWorkload, seed: int, where: str) -> RequestTable:
    arrivals = draw_arrivals(
        cfg.intervals,
        rng_for(seed, Stream.INTERVALS),
        cfg.num_requests,
        cfg.duration_s,
        where,
    )
    if arrivals.size == 0:
        raise ConfigError(
            f"{where}.duration_s: no request arrives before {cfg.duration_s} s; "
            "raise duration_s or the arrival rate"
        )
    prompt, decode = draw_lengths(
        cfg.lengths, rng_for(seed, Stream.LENGTHS), arrivals.size, seed, f"{where}.lengths"
    )
    if cfg.max_tokens is not None:
        prompt, decode = clip_proportional(prompt, decode, cfg.max_tokens)
    return make_table(arrivals, prompt, decode, source=_describe(cfg), copy=False)


def _build_synthetic_trace_lengths(
    cfg: SyntheticWorkload, seed: int, block_size: int, need_hashes: bool, where: str
) -> RequestTable:
    """Synthetic arrivals with lengths from a trace's rows; each request also carries its
    row's session id and prefix-block hashes (when the file has them), so sessions and
    prefix reuse of the trace survive."""
    arrivals = draw_arrivals(
        cfg.intervals, rng_for(seed, Stream.INTERVALS), cfg.num_requests, cfg.duration_s, where
    )
    if arrivals.size == 0:
        raise ConfigError(
            f"{where}.duration_s: no request arrives before {cfg.duration_s} s; "
            "raise duration_s or the arrival rate"
        )
    lengths = cfg.lengths
    data = read_trace(lengths.path, need_arrivals=False, need_hashes=need_hashes)
    pick = trace_length_rows(lengths, seed, len(data), arrivals.size)
    # per file row first, so a row taken twice gives the same request both times
    prompt = scale_tokens(data.prompt_tokens, lengths.prefill_scale)
    decode = scale_tokens(data.decode_tokens, lengths.decode_scale)
    if cfg.max_tokens is not None:
        prompt, decode = clip_proportional(prompt, decode, cfg.max_tokens)
    hash_offsets = hashes = None
    hash_block_size = 0
    if need_hashes and data.block_ids is not None:
        row_offsets, row_hashes, usable = _row_hashes(data, prompt, decode, block_size)
        offsets, hashes = gather_rows(row_offsets, row_hashes, pick)
        # blocks past a row's list get hashes private to the request, not to the row: a row
        # taken twice shares only the blocks its trace names
        keys = np.arange(pick.size, dtype=np.int64)
        hash_offsets, hashes = fit_block_hashes(
            offsets, hashes, usable[pick], prompt[pick] // block_size, keys
        )
        hash_block_size = block_size
    return make_table(
        arrivals,
        prompt[pick],
        decode[pick],
        session_id=None if data.session_id is None else data.session_id[pick],
        hash_offsets=hash_offsets,
        hashes=hashes,
        hash_block_size=hash_block_size,
        source_row=data.row_index[pick],
        source=_describe(cfg),
        copy=False,
    )


def _describe(cfg: SyntheticWorkload) -> str:
    lengths = type(cfg.lengths).__name__
    intervals = type(cfg.intervals).__name__
    return f"synthetic({lengths}, {intervals})"


# ---- trace replay ----


def _build_trace(
    cfg: TraceWorkload, block_size: int, need_hashes: bool, where: str
) -> RequestTable:
    windowed = cfg.start_s is not None or cfg.end_s is not None
    rows_needed = None if cfg.num_requests is None or windowed else cfg.offset + cfg.num_requests
    data = read_trace(
        cfg.path,
        cfg.format,
        need_arrivals=True,
        need_hashes=need_hashes,
        max_rows=rows_needed,
    )
    data = _cut(data, cfg, where)
    _check_token_bound(data, cfg, where)
    prompt = scale_tokens(data.prompt_tokens, cfg.prefill_scale)
    decode = scale_tokens(data.decode_tokens, cfg.decode_scale)
    if cfg.max_tokens is not None:
        prompt, decode = _clip(data, prompt, decode, cfg, where)
    arrivals = data.arrival_s * cfg.time_scale
    if cfg.start_at_zero:
        arrivals = arrivals - arrivals[0]

    hash_offsets = hashes = None
    hash_block_size = 0
    if need_hashes and data.block_ids is not None:
        hash_offsets, hashes = _engine_hashes(data, prompt, decode, block_size)
        hash_block_size = block_size
    return make_table(
        arrivals,
        prompt,
        decode,
        session_id=data.session_id,
        hash_offsets=hash_offsets,
        hashes=hashes,
        hash_block_size=hash_block_size,
        source_row=data.row_index,
        source=data.path,
        copy=False,
    )


def _cut(data: TraceData, cfg: TraceWorkload, where: str) -> TraceData:
    """The rows the workload keeps: past the offset, inside the time window, the first
    num_requests of those."""
    keep = np.arange(len(data)) >= cfg.offset
    if cfg.start_s is not None:
        keep &= data.arrival_s >= cfg.start_s
    if cfg.end_s is not None:
        keep &= data.arrival_s < cfg.end_s
    rows = np.flatnonzero(keep)
    if cfg.num_requests is not None:
        if rows.size < cfg.num_requests:
            cut = "" if rows.size == len(data) else " after offset and time window"
            raise TraceError(
                f"{cfg.path}: {where}.num_requests is {cfg.num_requests} but the file has only "
                f"{rows.size} data rows{cut}"
            )
        rows = rows[: cfg.num_requests]
    if rows.size == 0:
        raise TraceError(
            f"{cfg.path}: no row left after {where}.offset {cfg.offset} and the time window "
            f"[{cfg.start_s}, {cfg.end_s})"
        )
    if rows.size == len(data):
        return data
    return take_rows(data, rows)


def _check_token_bound(data: TraceData, cfg: TraceWorkload, where: str) -> None:
    """Reject rows whose scaled lengths would not fit the engine's integer counters."""
    for raw, scale, col in zip(
        (data.prompt_tokens, data.decode_tokens),
        (cfg.prefill_scale, cfg.decode_scale),
        TOKEN_COLUMNS[data.format],
        strict=True,
    ):
        over = np.flatnonzero(raw * scale > MAX_REQUEST_TOKENS)
        if over.size:
            i = int(over[0])
            loc = RowLocator(data.path, data.row_index + 1)
            raise loc.error(
                i, col, f"{raw[i]:g} tokens (x{scale:g}) exceed the limit {MAX_REQUEST_TOKENS}"
            )


def _clip(
    data: TraceData, prompt: np.ndarray, decode: np.ndarray, cfg: TraceWorkload, where: str
) -> tuple[np.ndarray, np.ndarray]:
    if cfg.clip == "proportional":
        return clip_proportional(prompt, decode, cfg.max_tokens)
    if cfg.clip == "prompt":
        return clip_prompt(prompt, decode, cfg.max_tokens)
    i = first_over(prompt, decode, cfg.max_tokens)
    if i is not None:
        p_col, d_col = TOKEN_COLUMNS[data.format]
        loc = RowLocator(data.path, data.row_index + 1)
        raise loc.error(
            i,
            f"{p_col}+{d_col}",
            f"{prompt[i]}+{decode[i]} tokens exceed {where}.max_tokens = {cfg.max_tokens} "
            f"({where}.clip is 'error'; use 'proportional' or 'prompt' to shrink)",
        )
    return prompt, decode


def _engine_hashes(
    data: TraceData, prompt: np.ndarray, decode: np.ndarray, block_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """Trace block ids -> chained engine-block hashes fitted to the final lengths."""
    offsets, hashes, usable = _row_hashes(data, prompt, decode, block_size)
    return fit_block_hashes(offsets, hashes, usable, prompt // block_size, data.row_index)


def _row_hashes(
    data: TraceData, prompt: np.ndarray, decode: np.ndarray, block_size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row's engine-block hashes (CSR) and how many of them stay valid after scaling or
    clipping changed its lengths."""
    src = data.block_ids
    if block_size % src.block_size and src.block_size % block_size:
        raise TraceError(
            f"{data.path}: block_size mismatch: trace blocks of {src.block_size} tokens cannot "
            f"map onto engine blocks of {block_size} (one must be a multiple of the other)"
        )
    raw_prompt = np.floor(data.prompt_tokens).astype(np.int64)
    if src.covers_output:
        # ids only exist for full trace blocks, so they cover len*block tokens
        engine_counts = np.diff(src.offsets) * src.block_size // block_size
    else:
        engine_counts = raw_prompt // block_size
    offsets, hashes = derive_block_hashes(
        src.offsets, src.ids, src.block_size, block_size, engine_counts
    )
    # After scaling/clipping: output-block hashes stay valid only while the prompt is unchanged.
    same_prompt = prompt == raw_prompt
    usable_tokens = np.where(same_prompt & src.covers_output, prompt + decode, prompt)
    return offsets, hashes, usable_tokens // block_size
