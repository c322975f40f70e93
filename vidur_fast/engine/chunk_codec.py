"""metrics.h5 chunks compressed outside HDF5, so that threads can do it without the GIL.

Columns are 1-D datasets with chunks of CHUNK_ROWS rows (fewer when the whole column is
shorter) and the filters `shuffle` (except UNSHUFFLED columns) then `gzip` level GZIP_LEVEL.
encode_chunk produces the bytes those filters would store, which h5py's write_direct_chunk puts
into the file as they are: any HDF5 reader decodes them like chunks HDF5 compressed itself.
"""

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
    planes = np.ascontiguousarray(values.view(np.uint8).reshape(rows, values.itemsize).T)
    # One zlib stream of a deflate part per plane. The low mantissa bytes of floats are noise:
    # gzip spends 4x longer on them than on the rest for nothing, so a plane whose sample does
    # not shrink goes in stored (uncompressed) deflate blocks.
    out = [_ZLIB_HEADER]
    for i, plane in enumerate(planes):
        sample = plane[:_SAMPLE_BYTES]
        noise = len(zlib.compress(sample, GZIP_LEVEL)) > _NOISE_RATIO * sample.shape[0]
        part = zlib.compressobj(0 if noise else GZIP_LEVEL, zlib.DEFLATED, -15)  # raw deflate
        out.append(part.compress(plane))
        out.append(part.flush(zlib.Z_FINISH if i == planes.shape[0] - 1 else zlib.Z_SYNC_FLUSH))
    out.append(zlib.adler32(planes).to_bytes(4, "big"))
    return b"".join(out)


# the two bytes zlib starts a level-1 stream with (deflate, 32 KiB window, fastest)
_ZLIB_HEADER = b"\x78\x01"
_SAMPLE_BYTES = 4096
_NOISE_RATIO = 0.9
