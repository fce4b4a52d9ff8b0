"""Reader for the IDX file format of MNIST-like datasets (raw or gzip-compressed).

An IDX file is a 4-byte magic number, one big-endian uint32 per dimension, then the data in C order,
big-endian::

    byte 0-1   0x00 0x00
    byte 2     element type: 0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32, 0x0E float64
    byte 3     number of dimensions D (1 for labels, 3 for images)
    4 .. 4+4D  the D sizes (uint32, big-endian)
    then       prod(sizes) elements

Reference: Y. LeCun, C. Cortes, C. J. C. Burges, "The MNIST database of handwritten digits" (file format
section of the original distribution page).
"""
from __future__ import annotations

import gzip
import os
import zlib

import numpy as np

__all__ = ["IDXFormatError", "read_idx", "parse_idx", "read_maybe_gzip", "maybe_gunzip", "GZIP_MAGIC"]

#: First two bytes of every gzip stream (RFC 1952).
GZIP_MAGIC = b"\x1f\x8b"

# IDX type code -> big-endian numpy dtype
_DTYPES = {0x08: np.dtype("u1"), 0x09: np.dtype("i1"), 0x0B: np.dtype(">i2"), 0x0C: np.dtype(">i4"),
           0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}


class IDXFormatError(ValueError):
    """An IDX file is truncated, corrupted, or not an IDX file at all (bad magic, sizes that do not match
    the data length, broken gzip stream)."""


def maybe_gunzip(data: bytes, what: str = "data") -> bytes:
    """``data`` decompressed if it starts with the gzip magic ``1f 8b``, else ``data`` unchanged.

    Raises
    ------
    IDXFormatError
        If the gzip stream is truncated or corrupted (``what`` names it in the message).
    """
    if data[:2] != GZIP_MAGIC:
        return data
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as e:
        raise IDXFormatError(f"{what}: corrupted or truncated gzip stream ({e}); "
                             "delete the file and fetch it again") from None


def read_maybe_gzip(path: str | os.PathLike) -> bytes:
    """The bytes of ``path``, decompressed when the file starts with the gzip magic ``1f 8b``.

    The decision is made on the content, not the file name: ``x.gz`` holding raw bytes and ``x`` holding
    a gzip stream both read correctly.

    Raises
    ------
    IDXFormatError
        If the file looks like gzip but the stream is truncated or corrupted.
    OSError
        If the file cannot be read.
    """
    with open(path, "rb") as f:
        return maybe_gunzip(f.read(), os.fspath(path))


def parse_idx(data: bytes | bytearray | memoryview, what: str = "IDX data") -> np.ndarray:
    """Decode the bytes of one uncompressed IDX file.

    Parameters
    ----------
    data : bytes-like
        The whole file content.
    what : str
        Name used in error messages (usually the file path).

    Returns
    -------
    numpy.ndarray
        A writable C-contiguous array in native byte order whose shape is the header's dimensions and
        whose dtype is the header's element type (uint8 for MNIST images (N, 28, 28) and labels (N,)).

    Raises
    ------
    IDXFormatError
        On a bad magic number, an unknown element type, zero dimensions, a truncated header, or a data
        length that does not equal the product of the dimensions times the element size.
    """
    buf = memoryview(data).cast("B")
    if len(buf) < 4:
        raise IDXFormatError(f"{what}: {len(buf)} bytes, too short for the 4-byte IDX magic number "
                             "(file truncated or empty)")
    zero, type_code, ndim = bytes(buf[:2]), buf[2], buf[3]
    if zero != b"\x00\x00":
        hint = " (this is a gzip stream: decompress it, or use read_idx)" if zero == GZIP_MAGIC else ""
        raise IDXFormatError(f"{what}: bad magic number {bytes(buf[:4]).hex()}, an IDX file starts with "
                             f"00 00 <type> <ndim>{hint}")
    if type_code not in _DTYPES:
        allowed = ", ".join(f"0x{c:02X}" for c in _DTYPES)
        raise IDXFormatError(f"{what}: unknown IDX element type 0x{type_code:02X}; expected one of {allowed}")
    if ndim == 0:
        raise IDXFormatError(f"{what}: IDX header declares 0 dimensions; expected at least 1")
    header = 4 + 4 * ndim
    if len(buf) < header:
        raise IDXFormatError(f"{what}: truncated header, {ndim} dimensions need {header} bytes, "
                             f"the file has {len(buf)}")
    shape = tuple(int(s) for s in np.frombuffer(buf, dtype=">u4", count=ndim, offset=4))
    dtype = _DTYPES[type_code]
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    found = len(buf) - header
    if found != expected:
        problem = "truncated" if found < expected else "has trailing bytes"
        raise IDXFormatError(f"{what}: data length does not match the header dimensions {shape} of "
                             f"{dtype.newbyteorder('=').name}: expected {expected} bytes after the "
                             f"{header}-byte header, found {found} (file {problem})")
    out = np.frombuffer(buf, dtype=dtype, offset=header).reshape(shape)
    return out.astype(dtype.newbyteorder("="), copy=True)


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read an IDX file, raw or gzip-compressed (detected from the magic bytes, not the file name).

    Parameters
    ----------
    path : str or os.PathLike
        e.g. ``train-images-idx3-ubyte`` or ``train-images-idx3-ubyte.gz``.

    Returns
    -------
    numpy.ndarray
        Shape and dtype from the header, native byte order, writable. MNIST / Fashion-MNIST:
        images uint8 (N, 28, 28) with N = 60000 (train) or 10000 (test), pixel values 0..255;
        labels uint8 (N,) with values 0..9.

    Raises
    ------
    IDXFormatError
        Bad magic number, truncated file or header, dimensions that disagree with the data length,
        corrupted gzip stream (a ``ValueError``).
    FileNotFoundError, OSError
        If the file cannot be read.

    Examples
    --------
    >>> images = read_idx("train-images-idx3-ubyte.gz")   # doctest: +SKIP
    >>> images.shape, images.dtype                          # doctest: +SKIP
    ((60000, 28, 28), dtype('uint8'))
    """
    return parse_idx(read_maybe_gzip(path), what=os.fspath(path))
