"""RGBA pixels -> a PNG file's bytes (stdlib only: zlib, struct), for the notebook's inline images.

The smallest correct PNG (PNG spec, ISO/IEC 15948): the signature, an IHDR of 8-bit RGBA
(colour type 6, no interlace), one IDAT of the zlib-compressed scanlines, each led by filter
byte 0 (none), and IEND; every chunk with its CRC-32.
"""

from __future__ import annotations

import struct
import zlib

SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png(width: int, height: int, rgba: bytes) -> bytes:
    """The PNG of a width x height image of RGBA bytes, row-major, top row first."""
    stride = 4 * width
    if width < 1 or height < 1 or len(rgba) != stride * height:
        raise ValueError(f"{len(rgba):,} bytes are no {width:,} x {height:,} RGBA image")
    scanlines = b"".join(b"\x00" + rgba[y * stride:(y + 1) * stride] for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)
    return SIGNATURE + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(scanlines, 6)) + _chunk(b"IEND", b"")


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
