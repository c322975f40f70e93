"""engine/chunk_codec.py: the chunks it compresses decode to the values, and a plane of zeros
(made once per chunk length) is stored as compressing it would store it."""

import zlib

import numpy as np
import pytest

from vidur_fast.engine.chunk_codec import GZIP_LEVEL, _adler32_zeros, encode_chunk

ROWS = 4096


def _planes_encoded(values: np.ndarray, rows: int) -> bytes:
    """The shuffled layout compressed plane by plane, every plane through zlib (no zero-plane
    shortcut): what encode_chunk must give."""
    values = np.concatenate([values, np.zeros(rows - values.shape[0], values.dtype)])
    planes = np.ascontiguousarray(values.view(np.uint8).reshape(rows, values.itemsize).T)
    out = [b"\x78\x01"]
    for i, plane in enumerate(planes):
        sample = plane[:4096]
        noise = len(zlib.compress(sample, GZIP_LEVEL)) > 0.9 * sample.shape[0]
        part = zlib.compressobj(0 if noise else GZIP_LEVEL, zlib.DEFLATED, -15)
        last = i == planes.shape[0] - 1
        out.append(part.compress(plane) + part.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH))
    out.append(zlib.adler32(planes).to_bytes(4, "big"))
    return b"".join(out)


def _columns():
    rng = np.random.default_rng(7)
    return [
        np.zeros(ROWS, np.int64),  # every plane zero
        rng.integers(0, 17, ROWS),  # one plane used
        rng.integers(0, 1 << 20, ROWS),  # three
        rng.integers(-3, 3, ROWS),  # negative: every plane used
        rng.integers(0, 9, ROWS).astype(np.int32),
        rng.integers(0, 9, ROWS).astype(np.int16),
        rng.random(ROWS) * 1e3,  # float noise planes, stored
        np.zeros(ROWS),
        rng.random(ROWS).astype(np.float32),
        rng.integers(0, 300, 1000),  # a column's last, short chunk (padded)
    ]


@pytest.mark.parametrize("k", range(len(_columns())))
def test_chunk_is_the_shuffled_planes_compressed_and_decodes_to_the_values(k):
    values = _columns()[k]
    blob = encode_chunk(values, ROWS, shuffle=True)
    assert blob == _planes_encoded(values, ROWS)
    raw = np.frombuffer(zlib.decompress(blob), np.uint8).reshape(values.itemsize, ROWS)
    back = np.ascontiguousarray(raw.T).view(values.dtype).reshape(-1)
    assert np.array_equal(back[: values.shape[0]], values)
    assert not back[values.shape[0] :].any()  # padded with zeros


@pytest.mark.parametrize("rows", [1, 2, 5, 17, 100, 1000])
def test_short_columns_zero_planes_as_compressing_them_stores_them(rows):
    # a few zero bytes do not shrink: such planes are stored, as any plane whose sample does not
    for values in (np.zeros(rows, np.int64), np.arange(rows, dtype=np.int64), np.zeros(rows)):
        assert encode_chunk(values, rows, shuffle=True) == _planes_encoded(values, rows)


def test_unshuffled_chunk_is_one_zlib_stream():
    values = np.arange(ROWS, dtype=np.int64)
    assert zlib.decompress(encode_chunk(values, ROWS, shuffle=False)) == values.tobytes()


@pytest.mark.parametrize("start", [b"", b"\x01", b"\xff" * 5000, bytes(range(256)) * 300])
@pytest.mark.parametrize("n", [0, 1, 4096, 1 << 16, 1 << 20])
def test_adler32_of_zeros_is_zlibs(start, n):
    check = zlib.adler32(start)
    assert _adler32_zeros(check, n) == zlib.adler32(bytes(n), check)
