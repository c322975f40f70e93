"""metrics.h5 chunks compressed outside HDF5, so that threads can do it without the GIL.

Columns are 1-D datasets with chunks of CHUNK_ROWS rows (fewer when the whole column is
shorter) and the filters `shuffle` (except UNSHUFFLED columns) then `gzip` level GZIP_LEVEL.
encode_chunk produces the bytes those filters would store, which h5py's write_direct_chunk puts
into the file as they are: any HDF5 reader decodes them like chunks HDF5 compressed itself.
"""

import functools
import zlib

import numpy as np

CHUNK_ROWS = 1 << 16
GZIP_LEVEL = 1

# Stage durations come from the timing grid and repeat exactly: gzip finds whole repeated 8-byte
# values (3x smaller, 3x faster) but not once shuffling has split them into byte planes.
UNSHUFFLED = frozenset({"stage_s"})


def shuffled(name: str) -> bool:
    """Whether column `name` is stored with the shuffle filter."""
    return name not in UNSHUFFLED


def encode_chunk(values: np.ndarray, rows: int, shuffle: bool) -> bytes:
    """One chunk of `rows` rows as stored by the shuffle and deflate filters; values shorter
    than a chunk (a column's last one) are padded with zeros, as HDF5 pads with the fill value.

    The shuffle filter stores all first bytes of the n elements, then all second bytes, ...
    (byte planes); the deflate filter stores a zlib stream. zlib releases the GIL.
    """
    values = np.ascontiguousarray(values)
    if values.shape[0] < rows:
        values = np.concatenate([values, np.zeros(rows - values.shape[0], values.dtype)])
    if not shuffle or values.itemsize == 1:
        return zlib.compress(values, GZIP_LEVEL)
    size = values.itemsize
    data = values.view(np.uint8)
    # Plane i is all zeros where byte i of the OR of all values is zero (counts far below
    # 2^56 leave most planes of an int64 zero): such a plane's deflate part is the same for
    # every chunk of this length, made once, and its adler32 is computed, not summed.
    uint = _UINTS.get(size)
    lanes = np.bitwise_or.reduce(values.view(uint)).tobytes() if uint else b"\xff" * size
    # One zlib stream of a deflate part per plane. The low mantissa bytes of floats are noise:
    # gzip spends 4x longer on them than on the rest for nothing, so a plane whose sample does
    # not shrink goes in stored (uncompressed) deflate blocks.
    out = [_ZLIB_HEADER]
    check = 1
    for i in range(size):
        last = i == size - 1
        if not lanes[i]:
            out.append(_zero_plane(rows, last))
            check = _adler32_zeros(check, rows)
            continue
        plane = np.ascontiguousarray(data[i::size])
        sample = plane[:_SAMPLE_BYTES]
        noise = len(zlib.compress(sample, GZIP_LEVEL)) > _NOISE_RATIO * sample.shape[0]
        out.append(_deflate_part(plane, 0 if noise else GZIP_LEVEL, last))
        check = zlib.adler32(plane, check)
    out.append(check.to_bytes(4, "big"))
    return b"".join(out)


def _deflate_part(plane, level: int, last: bool) -> bytes:
    """A raw deflate part of one plane, ending the stream when it is the last."""
    part = zlib.compressobj(level, zlib.DEFLATED, -15)
    return part.compress(plane) + part.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)


@functools.lru_cache(maxsize=64)
def _zero_plane(rows: int, last: bool) -> bytes:
    """The deflate part of a plane of `rows` zero bytes, at the level any plane gets: stored
    when its sample does not shrink (a few bytes of a short column do not)."""
    sample = bytes(min(rows, _SAMPLE_BYTES))
    noise = len(zlib.compress(sample, GZIP_LEVEL)) > _NOISE_RATIO * len(sample)
    return _deflate_part(bytes(rows), 0 if noise else GZIP_LEVEL, last)


def _adler32_zeros(check: int, n: int) -> int:
    """zlib.adler32 of n zero bytes continuing from `check`: the byte sum stays, the sum of
    sums grows by n times it."""
    a, b = check & 0xFFFF, check >> 16
    return (((b + n * a) % _ADLER_MOD) << 16) | a


_UINTS = {2: np.uint16, 4: np.uint32, 8: np.uint64}
_ADLER_MOD = 65521


# the two bytes zlib starts a level-1 stream with (deflate, 32 KiB window, fastest)
_ZLIB_HEADER = b"\x78\x01"
_SAMPLE_BYTES = 4096
_NOISE_RATIO = 0.9
