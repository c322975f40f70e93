"""Stage time of a batch, evaluated in plain Python from the same operator grids."""

import math

from vidur_fast.kernels.codes import KV_RULE_PER_REQUEST
from vidur_fast.kernels.dtypes import NS_PER_MS


def _ceil_to(x: int, m: int) -> int:
    return -(-x // m) * m


def _at(arr, i: int):
    """Grid value at i, clamped to the grid's edges."""
    return arr[min(max(i, 0), len(arr) - 1)]


def _at2(arr, i: int, j: int):
    i = min(max(i, 0), arr.shape[0] - 1)
    j = min(max(j, 0), arr.shape[1] - 1)
    return arr[i, j]


def batch_features(items, tparams, is_decode, kv_before):
    """(tokens, decodes, their kv sum, prefills, prefill kv, sum of squared chunks, prefill
    tokens) of a batch given as [(request, tokens)]; kv_before(req, n): tokens of req computed
    before its n tokens of this batch."""
    n_tok = n_dec = dec_kv = n_pre = pre_kv = pre_sq = pre_tok = 0
    for req, n in items:
        n_tok += n
        kv = kv_before(req, n)
        if is_decode(req, n):
            n_dec += 1
            dec_kv += kv
        else:
            n_pre += 1
            pre_tok += n
            pre_sq += n * n
            if tparams.kv_rule == KV_RULE_PER_REQUEST:
                pre_kv += _ceil_to(kv, tparams.g)
            else:
                pre_kv += kv
    return n_tok, n_dec, dec_kv, n_pre, pre_kv, pre_sq, pre_tok


def stage_ms(grids, tp, feats, last_stage: bool) -> float:
    n_tok, n_dec, dec_kv, n_pre, pre_kv, pre_sq, _ = feats
    rounded = _ceil_to(n_tok, 8)
    layer = _at(grids.tok_ms, rounded)
    layer += _at(grids.kv_save_ms, n_tok)
    if tp.tp > 1:
        layer += 2.0 * _at(grids.allreduce_ms, rounded)
    if n_dec > 0:
        kv_avg = _ceil_to(dec_kv // n_dec, tp.g)
        t = _at2(grids.decode_ms, n_dec, kv_avg // tp.g)
        if n_dec > 1:
            t *= 1.0 + tp.decode_overhead
        layer += t
    if n_pre > 0:
        chunk_eq = round(math.sqrt(float(pre_sq)))
        kv_i = _ceil_to(pre_kv, tp.g) // tp.g
        t = _at2(grids.prefill_ms, kv_i, _ceil_to(chunk_eq, tp.gc) // tp.gc)
        if n_pre > 1:
            t *= 1.0 + tp.prefill_overhead
        layer += t
    total = layer * tp.layers_per_stage + tp.cpu_overhead_ms
    total += tp.cpu_overhead_per_seq_ms * (n_dec + n_pre)
    if tp.pp > 1 and not last_stage:
        total += _at(grids.sendrecv_ms, rounded)
    return total


def stage_ns(grids, tp, feats, last_stage: bool) -> int:
    """Stage duration rounded once to whole nanoseconds (at least 1)."""
    return max(1, int(round(stage_ms(grids, tp, feats, last_stage) * NS_PER_MS)))


def host_ns(tp, feats) -> int:
    """Host part of a stage (fixed plus per-request overhead), in whole ns."""
    n_seqs = feats[1] + feats[3]
    return int(round((tp.cpu_overhead_ms + tp.cpu_overhead_per_seq_ms * n_seqs) * NS_PER_MS))
