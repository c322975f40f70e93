"""Bring prompt + output down to max_tokens (integer arithmetic, vectorised).

All rules keep prompt >= 1 and output >= 1 and guarantee prompt + output <= max_tokens
(max_tokens >= 2 is checked by the config validation).
"""

import numpy as np


def _ceil_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return -(-a // b)


def clip_proportional(
    prompt: np.ndarray, decode: np.ndarray, max_tokens: int
) -> tuple[np.ndarray, np.ndarray]:
    """Shrink both sides in proportion to their share of the excess.

    NOTE(vidur): TraceRequestLengthGenerator: P -= ceil(excess*P/total), D -= ceil(excess*D/total),
    then both >= 1. Its assert P+D <= max can fail after the >= 1 clip; here the leftover comes
    out of the side that can still give (prompt first).
    """
    total = prompt + decode
    excess = np.maximum(total - max_tokens, 0)
    p = np.maximum(prompt - _ceil_div(excess * prompt, total), 1)
    d = np.maximum(decode - _ceil_div(excess * decode, total), 1)
    over = np.maximum(p + d - max_tokens, 0)
    from_prompt = np.minimum(over, p - 1)
    return p - from_prompt, d - (over - from_prompt)


def clip_prompt(
    prompt: np.ndarray, decode: np.ndarray, max_tokens: int
) -> tuple[np.ndarray, np.ndarray]:
    """Take the whole excess from the prompt, but never below 1 token.

    NOTE(vidur): TraceReplayRequestGenerator subtracts the excess from P with no floor, so P can
    reach <= 0 when D alone exceeds max_tokens; here P stops at 1 and D is cut to max_tokens - 1.
    """
    excess = np.maximum(prompt + decode - max_tokens, 0)
    p = np.maximum(prompt - excess, 1)
    d = np.minimum(decode, max_tokens - p)
    return p, d


def first_over(prompt: np.ndarray, decode: np.ndarray, max_tokens: int) -> int | None:
    """Index of the first request with prompt + output > max_tokens, or None."""
    hits = np.flatnonzero(prompt + decode > max_tokens)
    return int(hits[0]) if hits.size else None
