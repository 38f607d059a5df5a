"""SentencePiece's precompiled charsmap (normalizer_spec.precompiled_charsmap: the NFKC-style
rules a T5 / mT5 / ALBERT / XLNet model was trained with), read and applied in pure Python.

The blob (sentencepiece normalizer.cc DecodePrecompiledCharsMap):

    u32 little-endian   trie size in bytes (a multiple of 4)
    trie                darts-clone double-array units, u32 little-endian each
    replacements        NUL-terminated UTF-8 strings; a trie value is a byte offset into them

A unit packs: label (bits 0-7, plus bit 31 so that a value unit never matches a label),
has-leaf (bit 8), and the offset to the children (bits 10-30, shifted left 8 more if bit 9 is
set). The child for byte c of the node at p is at p ^ offset ^ c; a leaf's value unit is at
p ^ offset of the node that has it.

The two references apply the same table differently, and each is followed exactly:
- tokenizers (normalizers/precompiled.rs, the spm_precompiled crate): per grapheme cluster of
  fewer than 6 bytes, the whole cluster is replaced by the replacement of the *first* (shortest)
  key that is a prefix of it; otherwise, and for longer clusters, char by char (`for_json`);
- llama.cpp (llm_tokenizer_ugm_session::normalize_prefix) and sentencepiece: the *longest* key
  that is a prefix of the bytes at hand (`longest`, used by ugm.py).
Every index read from the blob is checked, so a malformed blob is a FormatError naming what is
wrong; a walk consumes one input byte per step, so no blob can make it run longer than the text.
"""

from __future__ import annotations

import base64
import binascii
import struct

from ...errors import FormatError
from .graphemes import clusters

U32 = struct.Struct("<I")
VALUE_MASK = (1 << 31) - 1
LABEL_MASK = (1 << 31) | 0xFF
WHOLE_CLUSTER_BYTES = 6       # precompiled.rs: `if grapheme.len() < 6`


def _offset(unit: int) -> int:
    return (unit >> 10) << ((unit & (1 << 9)) >> 6)


class Charsmap:
    def __init__(self, blob: bytes, where: str = "precompiled_charsmap"):
        self.where = where
        if len(blob) < U32.size:
            self._bad(f"has {len(blob)} bytes, fewer than its 4-byte trie size")
        (size,) = U32.unpack_from(blob, 0)
        if size % 4:
            self._bad(f"gives a trie size of {size:,} bytes, not a whole number of 4-byte units")
        if size == 0:
            self._bad("has an empty trie (it needs at least its root unit)")
        if U32.size + size > len(blob):
            self._bad(f"gives a trie of {size:,} bytes, but only {len(blob) - U32.size:,} follow "
                      "its size (truncated)")
        self.units = struct.unpack_from(f"<{size // 4}I", blob, U32.size)
        self.replacements = bytes(blob[U32.size + size:])
        self.root = _offset(self._unit(0))
        self._cache: dict[str, str | None] = {}

    def _bad(self, what: str):
        raise FormatError(f"the tokenizer's {self.where} {what}")

    def _unit(self, index: int) -> int:
        if index >= len(self.units):
            self._bad(f"points to trie unit {index:,}, outside its {len(self.units):,} units "
                      "(a trie offset out of range)")
        return self.units[index]

    def _replacement(self, at: int) -> str:
        if at >= len(self.replacements):
            self._bad(f"points to replacement byte {at:,}, outside its "
                      f"{len(self.replacements):,} bytes of replacements")
        end = self.replacements.find(b"\0", at)
        raw = self.replacements[at:] if end < 0 else self.replacements[at:end]
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise FormatError(f"the tokenizer's {self.where} has a replacement at byte {at:,} "
                              "that is not UTF-8") from e

    def _matches(self, key: bytes, start: int = 0, first_only: bool = False):
        """The (end, replacement offset) of each key in the trie that is a prefix of
        key[start:], shortest first (darts-clone commonPrefixSearch; a NUL byte ends the key)."""
        node, seen = self.root, None
        for i in range(start, len(key)):
            c = key[i]
            if c == 0:
                return
            node ^= c
            unit = self._unit(node)
            if unit & LABEL_MASK != c:
                return
            node ^= _offset(unit)
            if seen is None:
                seen = {self.root}
            if node in seen:
                # a trie is a tree: coming back to a node on the same path means the units
                # loop, and a walk around that loop would match text no rule was written for
                self._bad(f"has a trie that loops (unit {node:,} is reached twice on one path)")
            seen.add(node)
            if (unit >> 8) & 1:
                yield i + 1, self._unit(node) & VALUE_MASK
                if first_only:
                    return

    def longest(self, data: bytes, start: int) -> tuple[int, str] | None:
        """The longest key that prefixes data[start:]: (its length in bytes, its replacement)."""
        found = None
        for end, at in self._matches(data, start):
            found = end - start, at
        return None if found is None else (found[0], self._replacement(found[1]))

    def _transform(self, chunk: str) -> str | None:
        """spm_precompiled's Precompiled::transform: the replacement of the first key that
        prefixes `chunk`, standing for the whole chunk."""
        if chunk in self._cache:
            return self._cache[chunk]
        hit = next(self._matches(chunk.encode("utf-8", "surrogatepass"), first_only=True), None)
        out = None if hit is None else self._replacement(hit[1])
        if len(self._cache) < 1 << 16:
            self._cache[chunk] = out
        return out

    def for_json(self, text: str) -> str:
        """tokenizers' Precompiled normaliser."""
        out: list[str] = []
        for cluster in clusters(text):
            if len(cluster.encode("utf-8", "surrogatepass")) < WHOLE_CLUSTER_BYTES:
                whole = self._transform(cluster)
                if whole is not None:
                    out.append(whole)
                    continue
            for ch in cluster:
                one = self._transform(ch)
                out.append(ch if one is None else one)
        return "".join(out)


def from_base64(text, where: str = "Precompiled normaliser's precompiled_charsmap") -> Charsmap:
    if not isinstance(text, str):
        raise FormatError(f"the tokenizer's {where} is not a base64 string")
    try:
        blob = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise FormatError(f"the tokenizer's {where} is not valid base64") from e
    return Charsmap(blob, where)
