"""Tokens to blocks: by a shift for power-of-two block sizes, by division otherwise; both give
floor and ceiling division exactly."""

import numpy as np
import pytest
from numba import njit
from vidur_fast.kernels.blocks import blocks_for_nb, full_blocks_nb
from vidur_fast.kernels.codes import SchedPolicy
from vidur_fast.kernels.state import block_shift_of

from tests.helpers.engine_harness import params
from vidur_fast.engine.run import run_engine


@njit(cache=False)
def _both(p, tokens):
    full = np.empty_like(tokens)
    ceil = np.empty_like(tokens)
    for k in range(tokens.shape[0]):
        full[k] = full_blocks_nb(p, tokens[k])
        ceil[k] = blocks_for_nb(p, tokens[k])
    return full, ceil


@pytest.mark.parametrize(
    ("block_size", "shift"), [(1, 0), (2, 1), (3, -1), (16, 4), (24, -1), (256, 8), (1000, -1)]
)
def test_block_shift_of(block_size, shift):
    assert block_shift_of(block_size) == shift


@pytest.mark.parametrize("block_size", [1, 3, 4, 16, 17, 32, 1024])
def test_tokens_to_blocks_floor_and_ceiling(block_size):
    tokens = np.arange(-1, 5 * block_size + 3, dtype=np.int64)  # -1: (n_tokens - 1) of 0
    for shift in (block_shift_of(block_size), -1):  # the shift where it applies, and division
        p = params(SchedPolicy.VLLM_V1, block_size=block_size)._replace(block_shift=shift)
        full, ceil = _both(p, tokens)
        np.testing.assert_array_equal(full, tokens // block_size)
        np.testing.assert_array_equal(ceil[1:], -(-tokens[1:] // block_size))


def test_engine_refuses_a_block_shift_that_does_not_match():
    p = params(SchedPolicy.VLLM_V1, block_size=16)._replace(block_shift=3)
    with pytest.raises(ValueError, match="block_shift 3 for block_size 16"):
        run_engine(*([None] * 8), p, None)
