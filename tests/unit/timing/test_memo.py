"""Warm grid cache found from the inputs alone (operator samples not loaded)."""

from dataclasses import replace

import numpy as np
import pytest

import vidur_fast.timing.sources as sources
from vidur_fast.config.predictor import PredictorConfig
from vidur_fast.timing.build import build_timing


def _cfg(tmp_path, **kw):
    return PredictorConfig(
        source="roofline",
        max_tokens=4096,
        max_prefill_chunk=2048,
        max_batch_size=32,
        cache_dir=str(tmp_path),
        **kw,
    )


def _no_samples(*args, **kwargs):
    raise AssertionError("operator samples were loaded")


def test_second_build_skips_samples_and_gives_identical_grids(tmp_path, monkeypatch):
    cfg = _cfg(tmp_path)
    first = build_timing("meta-llama/Meta-Llama-3-8B", "h100", None, 1, 1, cfg)
    assert not first.meta["from_cache"]
    monkeypatch.setattr(sources, "load_samples", _no_samples)
    second = build_timing("meta-llama/Meta-Llama-3-8B", "h100", None, 1, 1, cfg)
    assert second.meta["from_cache"] and second.meta["key"] == first.meta["key"]
    for a, b in zip(first.grids, second.grids, strict=True):
        np.testing.assert_array_equal(a, b)
    assert second.params == first.params


def test_changed_inputs_or_modes_do_not_use_the_memo(tmp_path, monkeypatch):
    cfg = _cfg(tmp_path)
    build_timing("meta-llama/Meta-Llama-3-8B", "h100", None, 1, 1, cfg)
    monkeypatch.setattr(sources, "load_samples", _no_samples)
    with pytest.raises(AssertionError, match="samples were loaded"):
        build_timing("meta-llama/Meta-Llama-3-8B", "h100", None, 2, 1, cfg)
    with pytest.raises(AssertionError, match="samples were loaded"):
        build_timing(
            "meta-llama/Meta-Llama-3-8B", "h100", None, 1, 1, replace(cfg, max_tokens=8192)
        )
    with pytest.raises(AssertionError, match="samples were loaded"):
        build_timing(
            "meta-llama/Meta-Llama-3-8B", "h100", None, 1, 1, replace(cfg, cache_mode="refresh")
        )
    # loader options that change the samples: KV-cache dtype, kernel envelope
    for changed in (replace(cfg, kv_cache_dtype="fp8"), replace(cfg, kernel_envelope=False)):
        with pytest.raises(AssertionError, match="samples were loaded"):
            build_timing("meta-llama/Meta-Llama-3-8B", "h100", None, 1, 1, changed)
