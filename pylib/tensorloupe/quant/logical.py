"""Quantised weights as tensors of real values: the checkpoint's stored parts grouped (groups.py)
become one float32 Tensor each, under the original weight name, whose byte source computes its
values (decode.py) from only the packed rows and scale rows a read needs.

Everything above the sampler (values, stats, heatmaps, health, diff, .npy) then reads a
dequantised weight like any float32 tensor: its `source` is a `DequantisedSource`, whose bytes are
the float32 values in row-major order, and whose reads go to the file's own sources (counted
there: `Checkpoint.bytes_read` says what a view of a dequantised weight cost). The stored parts
stay visible as `Tensor.parts`. A layout that cannot be decoded exactly keeps its stored tensors
as they are and says why ("packed, not dequantised: ..."), never floats.
"""

from __future__ import annotations

import math
import sys
from array import array
from functools import partial
from itertools import islice, repeat
from operator import floordiv, lt, mod

from ..dtypes import lookup
from ..errors import LOW_LEVEL_ERRORS, FormatError, TensorloupeError
from ..model import Checkpoint, Tensor
from ..source import ByteSource
from . import mlx, quanto, torchao
from .cells import cells, decodable, run
from .decode import dequantise
from .groups import Logical, Scheme, group
from .order import order_of

DESCRIBERS = {"mlx": mlx.describe, "quanto": quanto.describe, "torchao": torchao.describe}

CONFIG_KEY = "quantization_config"
MLX_KEY = "quantization"       # mlx-lm's own key (it also copies it to quantization_config)
# Rows decoded at once by one read: bounds the floats held for a read (exact statistics read
# 16 MiB ranges; a row of a wide weight is ~64 KB).
MAX_RUN_BYTES = 16 << 20
# Decoded rows kept for the next read (a sample's windows and a lattice's rows often share rows).
KEPT_BYTES = 4 << 20
# A part read by columns (GPTQ, AWQ, MXFP4) is read whole, once, up to this size: one read, not a
# read per packed row. Larger parts are read by one range per row (their column of it).
WHOLE_PART_BYTES = 256 << 10
# Positions below this many are read by whole rows (a handful of values: no lattice to speak of).
CELLS_AT_LEAST = 16
# The cell decoders' ranges of one source are joined where at most this many unwanted bytes lie
# between them: a browser read costs ~1 ms whatever its size (sampler/gather.py's GAP_BYTES is
# 64 KiB for that), but a lattice's rows of small parts (MLX scales and biases, GPTQ and AWQ
# scales and zero points) lie a few KiB apart while its rows of codes lie 16+ KiB apart, and
# joining those would read the whole codes (4x an F16 lattice's bytes for MLX 4-bit).
CELL_GAP_BYTES = 4 << 10
# Reads of at most this many float32 bytes in all (a sample's windows, a values request) of a
# layout whose logical rows are stored rows are decoded by the cell decoders, only the elements
# asked (a sample window is part of a row; several row decoders step element by element in
# Python). Larger reads (exact statistics, exports) decode whole rows, kept for the next read.
CELL_RANGES_BYTES = 1 << 20
# ... but not MLX's: its row decoder maps each group's codes through a table of its 2**bits
# values at C speed, which beats the cell decoder's arithmetic on every value (a sample took
# 40 ms by rows, 85 ms by cells in CPython, 4096 x 4096 4-bit).
ROWS_FIRST = ("mlx",)


def describe(scheme: Scheme) -> str:
    """The scheme in words, as the page's Tensor tab and the CLI say it."""
    if "described" in scheme.params:     # a layout with a module of its own says itself
        return scheme.params["described"]
    if scheme.layout in DESCRIBERS:
        return DESCRIBERS[scheme.layout](scheme)
    if scheme.layout == "fp8-block":
        return f"FP8 e4m3, {scheme.block[0]}x{scheme.block[1]} blocks"
    if scheme.layout in ("gptq", "awq"):
        words = [f"{scheme.method} {scheme.bits}-bit",
                 "per channel" if scheme.group_size == -1 else f"group {scheme.group_size}"]
        if scheme.act_order:
            words.append("act-order")
        if scheme.layout == "gptq":
            words.append("v1 (zeros stored minus 1)" if scheme.strategy in ("gptq", "gemm") else "v2")
        return ", ".join(words)
    if scheme.layout == "nvfp4":
        return f"{scheme.method} (E2M1, F8 scale per {scheme.group_size}, global scale)"
    if scheme.layout == "mxfp4":
        return "MXFP4 (E2M1, E8M0 scale per 32)"
    if scheme.layout == "fp8-scaled" and scheme.method == "fp8":
        if scheme.strategy == "block":
            return f"FP8 e4m3, {scheme.block[0]}x{scheme.block[1]} blocks"
        return f"FP8 e4m3, per {scheme.strategy}"
    words = [f"{scheme.method} int{scheme.bits}"]
    words.append(f"group {scheme.group_size}" if scheme.strategy == "group" else f"per {scheme.strategy}")
    words.append("symmetric" if scheme.symmetric else "asymmetric")
    if scheme.act_order:
        words.append("act-order")
    return ", ".join(words)


def apply(ckpt: Checkpoint, config: dict | None, where: str = "config.json") -> None:
    """Group the checkpoint's quantised weights by `config` (a config.json's object; its
    `quantization_config` says the scheme) into dequantised tensors. Without that key nothing
    changes; applied once (the page and the API may both offer the config)."""
    key = CONFIG_KEY
    qc = config.get(key) if isinstance(config, dict) else None
    if not isinstance(qc, dict) and isinstance(config, dict) and isinstance(config.get(MLX_KEY), dict):
        key, qc = MLX_KEY, config[MLX_KEY]
    if not isinstance(qc, dict) or "quantisation" in ckpt.extras:
        return
    said = f"{where} {key}"
    stored = {t.name: t for t in ckpt.tensors}
    readable = [(t.name, t.dtype, t.shape) for t in ckpt.tensors
                if t.problem is None and t.contiguous and t.source is not None]

    def read_small(name: str) -> list:
        t = stored[name]
        return lookup(t.dtype).decode(t.source.read_data(t.offset, t.nbytes), t.big_endian)

    try:
        found = group(readable, qc, said, read_small)
    except LOW_LEVEL_ERRORS as e:
        raise FormatError(f"{said} does not describe these tensors: {e}", file=where) from e
    order = {t.name: i for i, t in enumerate(ckpt.tensors)}
    made: dict[str, Tensor] = {}       # the name of its first stored part -> the tensor in its place
    dropped: set[str] = set()
    packed = 0
    for logical in found:
        parts = tuple(sorted((stored[p.name] for p in logical.parts.values()), key=lambda t: order[t.name]))
        if logical.reason:
            packed += 1
            codes = stored[logical.parts["codes"].name]
            codes.info = {**codes.info, "quantisation": logical.reason}
            ckpt.warnings.append(f"tensor {codes.name!r}: {logical.reason}")
            continue
        made[parts[0].name] = as_tensor(logical, parts)
        dropped.update(t.name for t in parts)
    method = str(qc.get("quant_method") or qc.get("format") or ("mlx" if mlx.is_mlx(qc) else "?"))
    if not found:
        ckpt.warnings.append(f"{said} says quant_method {method!r}: no tensors of a layout "
                             "tensorloupe dequantises were found; they are shown packed, as stored")
    tensors = [made[t.name] if t.name in made else t for t in ckpt.tensors
               if t.name in made or t.name not in dropped]
    ckpt.replace_tensors(tensors)
    schemes = sorted({t.info["dequantised from"] for t in made.values()})
    ckpt.extras["quantisation"] = {"method": method, "source": said, "schemes": schemes,
                                   "dequantised": len(made), "packed": packed}


def as_tensor(logical: Logical, parts: tuple) -> Tensor:
    """The float32 tensor of a decodable logical weight, its stored tensors as `parts`."""
    return Tensor(logical.name, "F32", logical.shape, 0, 4 * math.prod(logical.shape),
                  source=DequantisedSource(logical, {t.name: t for t in parts}),
                  info={"dequantised from": describe(logical.scheme), "scheme": _facts(logical.scheme)},
                  parts=parts)


def _facts(scheme: Scheme) -> dict:
    out = {"layout": scheme.layout, "method": scheme.method, "bits": scheme.bits}
    for key in ("group_size", "strategy", "block"):
        value = getattr(scheme, key)
        if value is not None:
            out[key] = list(value) if isinstance(value, tuple) else value
    out["symmetric"], out["act_order"] = scheme.symmetric, scheme.act_order
    out["from"] = dict(scheme.facts)
    return out


def read_joined(source: ByteSource, ranges: list[tuple[int, int]], gap: int = CELL_GAP_BYTES) -> list[bytes]:
    """`source.read_many(ranges)`'s bytes, read as fewer ranges: neighbours (in file order, or
    overlapping) with at most `gap` bytes between them are one read, up to MAX_RUN_BYTES."""
    order = sorted(range(len(ranges)), key=lambda k: ranges[k][0])
    runs: list[list] = []           # [start, end, indices of the ranges it holds]
    for k in order:
        o, n = ranges[k]
        if runs and o - runs[-1][1] <= gap and max(runs[-1][1], o + n) - runs[-1][0] <= MAX_RUN_BYTES:
            run = runs[-1]
            run[1] = max(run[1], o + n)
            run[2].append(k)
        else:
            runs.append([o, o + n, [k]])
    if len(runs) == len(ranges):
        return source.read_many(ranges)
    out: list = [b""] * len(ranges)
    for (start, end, held), data in zip(runs, source.read_many([(s, e - s) for s, e, _ in runs])):
        if len(held) == 1:
            out[held[0]] = data
            continue
        for k in held:
            o, n = ranges[k]
            out[k] = data[o - start:o - start + n]
    return out


class _Reader:
    """What a decoder reads with: `read(part, first row, rows)`, and `read.cols(part, c0, c1)`."""

    __slots__ = ("rows", "cols", "memo")

    def __init__(self, rows, cols):
        self.rows, self.cols = rows, cols
        self.memo: dict = {}     # what decoders derive once per weight (GPTQ's checked g_idx)

    def __call__(self, name: str, row_start: int, row_count: int) -> bytes:
        return self.rows(name, row_start, row_count)


class RowsSource(ByteSource):
    """The float32 bytes (little-endian, row-major) of a tensor computed from stored ones, row
    by row: a read of any range computes the whole rows it touches (`_compute(r0, r1)`, a
    subclass's), rows shared by neighbouring ranges once, the last ones kept. Reads are counted
    on the stored tensors' own sources; `codes` is the stored tensor that locates it. A
    dequantised weight (below) and an adapter's ΔW (adapters/delta.py) are two of these."""

    def __init__(self, codes: Tensor, shape: tuple, row_values: int):
        super().__init__()
        self.codes = codes
        self.name = codes.source.name
        self.size = 4 * math.prod(shape)
        self.row_bytes = 4 * row_values
        self._kept: list[tuple[int, int, bytes]] = []   # (first row, end row, float32 bytes)

    def _compute(self, r0: int, r1: int) -> array:
        raise NotImplementedError

    @property
    def waits(self) -> bool:
        return self.codes.source.waits

    def root(self) -> ByteSource:
        return self.codes.source.root()

    def file_offset(self, offset: int) -> int:
        return self.codes.locate()

    def known_file_offset(self, offset: int) -> int | None:
        return self.codes.known_file_offset

    def _read(self, offset: int, n: int) -> bytes:
        return self._count(self._ranges([(offset, n)])[0])

    def _read_many(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        return self._count_each(self._ranges(ranges))

    def _ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """Each range's bytes; rows shared by neighbouring ranges are decoded once."""
        rb = self.row_bytes
        spans = [(o // rb, -(-(o + n) // rb)) for o, n in ranges]
        runs: list[list[int]] = []
        for r0, r1 in sorted(spans):
            if runs and r0 <= runs[-1][1] and (max(r1, runs[-1][1]) - runs[-1][0]) * rb <= MAX_RUN_BYTES:
                runs[-1][1] = max(runs[-1][1], r1)
            else:
                runs.append([r0, r1])
        decoded = [(r0, r1, self._rows(r0, r1)) for r0, r1 in runs]
        out = []
        for o, n in ranges:
            r0, r1, data = next(d for d in decoded if d[0] * rb <= o and o + n <= d[1] * rb)
            out.append(data[o - r0 * rb:o - r0 * rb + n])
        return out

    def _rows(self, r0: int, r1: int) -> bytes:
        for k0, k1, data in self._kept:
            if k0 <= r0 and r1 <= k1:
                return data[(r0 - k0) * self.row_bytes:(r1 - k0) * self.row_bytes]
        values = self._compute(r0, r1)
        if sys.byteorder == "big":
            values.byteswap()
        data = values.tobytes()
        self._kept.append((r0, r1, data))
        while sum(len(d) for *_, d in self._kept) > KEPT_BYTES and len(self._kept) > 1:
            self._kept.pop(0)
        return data


class DequantisedSource(RowsSource):
    """The float32 bytes of one dequantised weight: rows decoded from only the stored rows they
    need, read from the parts' own sources."""

    def __init__(self, logical: Logical, parts: dict[str, Tensor]):
        super().__init__(parts[logical.parts["codes"].name], logical.shape, logical.rows_cols[1])
        self.logical, self.parts = logical, parts
        self._whole: dict[str, bytes] = {}               # small parts read once, whole
        self._columns: dict[tuple, bytes] = {}           # the last columns read of large parts
        self._reader = _Reader(self._read_part, self._read_cols)
        # where logical rows cross the stored rows, a sample's windows run in storage order
        self.sample_order = order_of(logical)

    def _decoding(self, fn, *args):
        """fn(*args), its errors located in this file and said as this weight's."""
        t = self.logical
        try:
            return fn(t, self._reader, *args)
        except TensorloupeError as e:
            raise e.located(file=self.name)
        except LOW_LEVEL_ERRORS as e:
            raise FormatError(f"tensor {t.name!r} cannot be dequantised as {describe(t.scheme)}: {e}",
                              file=self.name) from e

    def _compute(self, r0: int, r1: int) -> array:
        return self._decoding(dequantise, r0, r1)

    def _ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        if self.sample_order is None and decodable(self.logical) and self.logical.scheme.layout not in ROWS_FIRST \
                and sum(n for _, n in ranges) <= CELL_RANGES_BYTES and all(o % 4 == 0 == n % 4 for o, n in ranges):
            found = self._cell_ranges(ranges)
            if found is not None:
                return found
        return super()._ranges(ranges)

    def _cell_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes] | None:
        """The float32 bytes of each range, each cut at row ends into one-row products for the
        cell decoders (every range's reads issued together); None where a decoder has no cell
        path for them."""
        cols = self.logical.rows_cols[1]
        products, counts = [], []
        for o, n in ranges:
            e, end = o // 4, (o + n) // 4
            counts.append(0)
            while e < end:
                r, c = divmod(e, cols)
                stop = min(end, (r + 1) * cols)
                products.append(([r], list(range(c, c + stop - e))))
                counts[-1] += 1
                e = stop
        # a window's two rows are neighbouring ranges of each part: joined where they touch
        got = self._decoding(run, partial(self._pick_many, gap=0), products)
        if any(g is None for g in got):
            return None
        parts = iter(got)
        out = []
        for k in counts:
            flat: list = []
            for _ in range(k):
                flat += next(parts)
            values = array("f", flat)
            if sys.byteorder == "big":
                values.byteswap()
            out.append(values.tobytes())
        return out

    def read_sample(self, windows: list[tuple[int, int]]) -> list[list]:
        """The values of each window of `sample_order` (quant/order.py), as float32: each window
        decoded from the runs of stored bytes it is, every window's reads issued together."""
        order = self.sample_order
        segments = [order.segments(start, count) for start, count in windows]
        grids = iter(self._decoding(run, self._pick_many, [p for these in segments for p in these]))
        out = []
        for these in segments:
            flat: list = []
            for _ in these:
                flat += next(grids)
            out.append(list(array("f", flat)))
        self.reads += 1
        self.bytes_read += 4 * sum(n for _, n in windows)
        return out

    def cells(self, positions: list[int]) -> list | None:
        """The values at these flat positions (a heatmap lattice: sampler/gather.py asks first),
        decoding only the cells of their rows x columns (quant/cells.py); None where the
        positions are not such a product or the layout has no cell decoder: then whole rows."""
        cols = self.logical.rows_cols[1]
        rows = sorted(set(map(floordiv, positions, repeat(cols))))       # (map: at C speed)
        wanted = sorted(set(map(mod, positions, repeat(cols))))
        if len(positions) < CELLS_AT_LEAST or len(rows) * len(wanted) > 2 * len(positions):
            return None
        # a lattice's rows of small parts lie close together: joined (a sample's windows are
        # few ranges already, and joining them would read more than twice an F16 sample's bytes)
        grid = self._decoding(cells, partial(self._pick_many, gap=CELL_GAP_BYTES), rows, wanted)
        if grid is None:
            return None
        self.reads += 1
        self.bytes_read += 4 * len(positions)
        if len(positions) != len(grid) or not all(map(lt, positions, islice(positions, 1, None))):
            n = len(wanted)
            at_row = {r: i * n for i, r in enumerate(rows)}
            at_col = {c: j for j, c in enumerate(wanted)}
            grid = [grid[at_row[p // cols] + at_col[p % cols]] for p in positions]
        # (else: as many ascending positions as rows x columns are that product, row-major: the grid)
        # float32 as the row decoders give them (an MXFP4 6 * 2**127 is inf there too)
        return list(array("f", grid))

    def _pick_many(self, requests: list[tuple[str, list[int], int, int]], gap: int | None = None) -> list[list[bytes]]:
        """For each request (part, stored rows, c0, c1), columns [c0, c1) of each of those rows
        (stored rows None: [elements c0..c1 of the part flattened]): one range per row, every
        request's ranges issued together (one read_many per source);
        with `gap`, ranges that close are joined (read_joined)."""
        ranges, sources = [], {}
        for name, rows, c0, c1 in requests:
            part = self.parts[name]
            item = max(1, int(lookup(part.dtype).bits) // 8)
            if rows is None:    # elements [c0, c1) of the part flattened (bnb's flat codes, HQQ's runs)
                if not 0 <= c0 <= c1 <= part.nbytes // item:
                    raise FormatError(f"tensor {name!r} has {part.nbytes // item:,} elements: {c0:,}..{c1:,} of "
                                      f"them cannot hold part of {self.logical.name!r}", file=self.name)
                mine = sources.setdefault(id(part.source), (part.source, []))[1]
                ranges.append((id(part.source), len(mine), 1))
                mine.append((part.offset + c0 * item, (c1 - c0) * item))
                continue
            count = self.logical.part_rows.get(name) or part.shape[0]
            row = part.nbytes // max(count, 1)
            if not (0 <= c0 <= c1 <= row // item and all(0 <= r < count for r in rows)):
                raise FormatError(f"tensor {name!r} has {count:,} rows of {row // item:,}: columns {c0:,}..{c1:,} "
                                  f"of rows {rows[0]:,}..{rows[-1]:,} cannot hold part of {self.logical.name!r}",
                                  file=self.name)
            mine = sources.setdefault(id(part.source), (part.source, []))[1]
            ranges.append((id(part.source), len(mine), len(rows)))
            mine += [(part.offset + r * row + c0 * item, (c1 - c0) * item) for r in rows]
        got = {key: source.read_many(asked) if gap is None else read_joined(source, asked, gap)
               for key, (source, asked) in sources.items()}
        return [got[key][at:at + n] for key, at, n in ranges]

    def _read_cols(self, name: str, c0: int, c1: int, r0: int = 0, r1: int | None = None) -> bytes:
        """Columns [c0, c1) of rows [r0, r1) (default all) of a part, row after row: a GPTQ, AWQ
        or gpt-oss MXFP4 weight's logical rows are columns of its packed parts. A part of at
        most WHOLE_PART_BYTES is read once, whole; a larger one by one range per row, all
        issued together."""
        part = self.parts[name]
        rows = self.logical.part_rows.get(name) or part.shape[0]
        r1 = rows if r1 is None else r1
        item = max(1, int(lookup(part.dtype).bits) // 8)
        row = part.nbytes // max(rows, 1)
        cols = row // item
        if not (0 <= c0 <= c1 <= cols and 0 <= r0 <= r1 <= rows):
            raise FormatError(f"tensor {name!r} has {rows:,} x {cols:,}: rows {r0:,}..{r1:,}, columns "
                              f"{c0:,}..{c1:,} of it cannot hold part of {self.logical.name!r}", file=self.name)
        if part.nbytes <= WHOLE_PART_BYTES:
            whole = self._whole.get(name)
            if whole is None:
                whole = self._whole[name] = part.source.read_data(part.offset, part.nbytes)
            if (c0, c1, r0, r1) == (0, cols, 0, rows):
                return whole
            return b"".join([whole[r * row + c0 * item:r * row + c1 * item] for r in range(r0, r1)])
        key = (name, c0, c1, r0, r1)
        data = self._columns.get(key)
        if data is None:   # kept: a lattice's rows of one MXFP4 group share the same columns
            ranges = [(part.offset + r * row + c0 * item, (c1 - c0) * item) for r in range(r0, r1)]
            data = self._columns[key] = b"".join(part.source.read_many(ranges))
            while sum(map(len, self._columns.values())) > KEPT_BYTES and len(self._columns) > 1:
                del self._columns[next(iter(self._columns))]
        return data

    def _read_part(self, name: str, row_start: int, row_count: int) -> bytes:
        part = self.parts[name]
        rows = self.logical.part_rows.get(name) or (part.shape[0] if part.shape else 1)
        if not 0 <= row_start <= row_start + row_count <= rows:   # a decoder's bug, never a read beside it
            raise FormatError(f"tensor {name!r} has {rows:,} rows: rows {row_start:,}..{row_start + row_count:,} "
                              f"of it cannot hold part of {self.logical.name!r}", file=self.name)
        row = part.nbytes // max(rows, 1)
        if (row_start, row_count) == (0, rows) and part.nbytes <= WHOLE_PART_BYTES:
            # a small part read whole (g_idx, a global scale): once, for every window and cell call
            whole = self._whole.get(name)
            if whole is None:
                whole = self._whole[name] = part.source.read_data(part.offset, part.nbytes)
            return whole
        return part.source.read_data(part.offset + row_start * row, row_count * row)
