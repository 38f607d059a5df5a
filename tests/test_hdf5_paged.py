"""Paged chunk indexes (issue 26): h5py's libver="latest" fixed and extensible arrays whose data
blocks hold more than 2^`page bits` entries (fixtures/hdf5_files.py write_paged). Oracle: h5py,
every element. The file's own bytes are parsed here (spec VII.B) to show that the fixture really
is paged and partly uninitialised, and to find the pages and bitmaps the attacks change."""

import struct

import h5py
import numpy as np
import pytest

import hdf5_files

import tensorloupe
from tensorloupe.errors import FormatError
from tensorloupe.formats.hdf5.headers import lookup3
from tensorloupe.source import FileSource
from tensorloupe.source.base import MemorySource

from test_hdf5 import OUT

PATH = OUT / "h5py-paged.h5"
NAMES = ("fixed/plain", "fixed/gzip", "fixed/partial", "extensible/plain", "extensible/gzip")
O = 8                                     # h5py's size of offsets and lengths
FA_PREFIX = 4 + 1 + 1 + O                 # "FADB", version, client, header address
ENTRY = O                                 # an unfiltered entry: the chunk's address


@pytest.fixture(scope="module")
def path():
    if not PATH.exists():
        OUT.mkdir(parents=True, exist_ok=True)
        hdf5_files.write_paged(PATH)
    return PATH


def layout_address(path, name):
    return tensorloupe.open(path).tensor(name).source.layout.address


def fixed_array(data, header):
    """(page bits, entry count, data block address) of the "FAHD" at `header`."""
    assert data[header:header + 4] == b"FAHD"
    page_bits = data[header + 7]
    count, block = struct.unpack_from("<QQ", data, header + 8)
    return page_bits, count, block


def extensible_array(data, header):
    """The "EAHD" at `header`: its parameters, and the addresses in its index block."""
    assert data[header:header + 4] == b"EAHD"
    size, max_bits, index_elements, min_elements, min_pointers, page_bits = data[header + 6:header + 12]
    index_block = struct.unpack_from("<Q", data, header + 12 + 6 * O)[0]
    direct = 2 * (min_pointers - 1)
    supers = 1 + max_bits - (min_elements.bit_length() - 1)
    in_index = 2 * (min_pointers.bit_length() - 1)
    at = index_block + 6 + O + index_elements * size + direct * O
    super_addresses = struct.unpack_from(f"<{supers - in_index}Q", data, at)
    return dict(size=size, max_bits=max_bits, index_elements=index_elements, min_elements=min_elements,
                page_bits=page_bits, in_index=in_index, super_addresses=super_addresses)


def reseal(data, start, end):
    """Write the lookup3 checksum of data[start:end] after it (the attack changes a field, not
    the checksum that would give it away)."""
    data[end:end + 4] = lookup3(bytes(data[start:end])).to_bytes(4, "little")


def test_every_value_of_every_paged_dataset_is_h5pys(path):
    ck = tensorloupe.open(path)
    with h5py.File(path) as f:
        for name in NAMES:
            t = ck.tensor(name)
            ref = f[name][()]
            assert t.info["index"] == ("fixed-array" if name.startswith("fixed") else "extensible-array")
            got = np.array(tensorloupe.values(t, 0, t.numel), dtype=ref.dtype).reshape(ref.shape)
            assert np.array_equal(got, ref), name


def test_the_fixture_is_paged_and_partly_uninitialised(path):
    data = path.read_bytes()
    for name in ("fixed/plain", "fixed/gzip", "fixed/partial"):
        page_bits, count, _ = fixed_array(data, layout_address(path, name))
        assert count > 1 << page_bits, name                   # paged: 3 pages of 1,024 entries
    _, count, block = fixed_array(data, layout_address(path, "fixed/partial"))
    assert -(-count // 1024) == 3 and data[block + FA_PREFIX] == 0b1010_0000  # page 1 never written
    with h5py.File(path) as f:
        assert (f["fixed/partial"][1024:2048] == -7).all()
    for name in ("extensible/plain", "extensible/gzip"):
        ea = extensible_array(data, layout_address(path, name))
        # super block 13's data blocks hold 16 * 2^7 = 2,048 entries: two pages each
        elements = ea["min_elements"] << ((13 + 1) // 2)
        assert elements == 2048 and elements > 1 << ea["page_bits"]
        assert hdf5_files.EA_PAGED_START == ea["index_elements"] + sum(
            (1 << (s // 2)) * (ea["min_elements"] << ((s + 1) // 2)) for s in range(13))
        sb = ea["super_addresses"][13 - ea["in_index"]]
        # 64 data blocks, a byte of bitmap each (H5EA__sblock_alloc), bits packed: data block d's
        # page p is bit 2d + p. Data block 0: both pages; data block 3: only its second.
        bitmap = data[sb + 6 + O + (ea["max_bits"] + 7) // 8:][:64]
        assert bitmap == bytes([0b1100_0001]) + bytes(63), name


def test_reading_one_chunk_reads_its_page_not_every_page(path):
    source = FileSource(path)
    ck = tensorloupe.open(source)
    with h5py.File(path) as f:
        ref = f["fixed/plain"][()].ravel()
        ea_ref = f["extensible/plain"][()]
    t = ck.tensor("fixed/plain")
    assert t.source._index is None                        # opening read no chunk index
    before = source.bytes_read
    assert tensorloupe.values(t, 1500, 1) == [ref[1500]]   # page 1 of 3
    page = 1024 * ENTRY + 4
    cost = source.bytes_read - before
    # the header, the data block's prefix, one page and one 2-byte chunk; all pages are 20,000+
    assert page <= cost < page + 200, cost
    e = ck.tensor("extensible/plain")
    before = source.bytes_read
    at = hdf5_files.EA_PAGED_START + 3 * 2048 + 1035                # data block 3, page 1
    assert tensorloupe.values(e, at, 1) == [ea_ref[at]]
    cost = source.bytes_read - before
    # header, index block (4 entries, 6 + 25 addresses), super block 13 (64 bitmap bytes and 64
    # addresses), the data block's prefix and one page: far less than its data block's two pages
    assert page <= cost < page + 1200, cost


def test_a_corrupted_page_is_refused_naming_the_dataset(path):
    data = bytearray(path.read_bytes())
    _, _, block = fixed_array(data, layout_address(path, "fixed/plain"))
    page1 = block + FA_PREFIX + 1 + 4 + (1024 * ENTRY + 4)
    data[page1 + 100] ^= 0x40
    ck = tensorloupe.open(MemorySource(bytes(data), "edited.h5"))
    t = ck.tensor("fixed/plain")
    with pytest.raises(FormatError, match=r"page 1 of the fixed array of dataset 'fixed/plain' fails its checksum"):
        tensorloupe.values(t, 0, t.numel)
    with h5py.File(path) as f:
        assert tensorloupe.values(t, 0, 5) == f["fixed/plain"][0, :5].tolist()      # page 0 is whole
        for name in NAMES[1:]:                                          # the rest of the file reads
            u = ck.tensor(name)
            assert np.array_equal(np.array(tensorloupe.values(u, 0, u.numel)), f[name][()].ravel()), name


def test_a_bitmap_claiming_a_page_never_written_is_refused(path):
    data = bytearray(path.read_bytes())
    _, _, block = fixed_array(data, layout_address(path, "fixed/partial"))
    data[block + FA_PREFIX] |= 0b0100_0000                  # page 1 "initialised"
    reseal(data, block, block + FA_PREFIX + 1)
    t = tensorloupe.open(MemorySource(bytes(data), "edited.h5")).tensor("fixed/partial")
    assert tensorloupe.values(t, 0, 3) == [0, 1, 2]
    with pytest.raises(FormatError, match=r"page 1 of the fixed array of dataset 'fixed/partial' fails its checksum"):
        tensorloupe.values(t, 1500, 1)


def test_a_bitmap_beyond_the_page_count_is_refused(path):
    data = bytearray(path.read_bytes())
    _, _, block = fixed_array(data, layout_address(path, "fixed/partial"))
    data[block + FA_PREFIX] |= 0b0000_1000                  # page 4 of 3
    reseal(data, block, block + FA_PREFIX + 1)
    t = tensorloupe.open(MemorySource(bytes(data), "edited.h5")).tensor("fixed/partial")
    with pytest.raises(FormatError, match=r"the fixed array of dataset 'fixed/partial' marks page 4 "
                                          r"initialised, but its data blocks have only 3 pages"):
        tensorloupe.values(t, 0, 1)


def test_a_lying_page_count_is_refused(path):
    # the header says 6,000 entries (6 pages) for the 2,500 chunks: refused before any page
    data = bytearray(path.read_bytes())
    header = layout_address(path, "fixed/plain")
    struct.pack_into("<Q", data, header + 8, 6000)
    reseal(data, header, header + 8 + 2 * O)
    t = tensorloupe.open(MemorySource(bytes(data), "edited.h5")).tensor("fixed/plain")
    with pytest.raises(FormatError, match=r"the fixed array of dataset 'fixed/plain' holds 6,000 entries for 2,500 chunks"):
        tensorloupe.values(t, 0, 1)


def test_an_extensible_arrays_super_block_bitmap_and_pages_are_checked(path):
    data = path.read_bytes()
    ea = extensible_array(data, layout_address(path, "extensible/plain"))
    sb = ea["super_addresses"][13 - ea["in_index"]]
    bitmap_at = sb + 6 + O + (ea["max_bits"] + 7) // 8
    with h5py.File(path) as f:
        ref = f["extensible/plain"][()]
    # a flipped bit without its checksum: the super block is refused
    flipped = bytearray(data)
    flipped[bitmap_at] ^= 0b0000_0010                   # data block 3, page 0
    t = tensorloupe.open(MemorySource(bytes(flipped), "edited.h5")).tensor("extensible/plain")
    assert tensorloupe.values(t, 0, 10) == ref[:10].tolist()   # the index block's entries still read
    with pytest.raises(FormatError, match=r"a super block of the extensible array of dataset "
                                          r"'extensible/plain' fails its checksum"):
        tensorloupe.values(t, t.numel - 1, 1)
    # re-sealed, data block 3's first page "initialised": that page was never written
    sealed = bytearray(flipped)
    end = bitmap_at + 64 + 64 * O
    reseal(sealed, sb, end)
    t = tensorloupe.open(MemorySource(bytes(sealed), "edited.h5")).tensor("extensible/plain")
    assert tensorloupe.values(t, hdf5_files.EA_PAGED_START, 3) == ref[hdf5_files.EA_PAGED_START:][:3].tolist()
    with pytest.raises(FormatError, match=r"page 0 of a data block of the extensible array of "
                                          r"dataset 'extensible/plain' fails its checksum"):
        tensorloupe.values(t, hdf5_files.EA_PAGED_START + 3 * 2048 + 5, 1)
    # a changed entry in data block 3's second page: that page is refused
    addresses = struct.unpack_from("<64Q", data, bitmap_at + 64)
    prefix = 6 + O + (ea["max_bits"] + 7) // 8 + 4
    corrupt = bytearray(data)
    corrupt[addresses[3] + prefix + (1024 * ENTRY + 4) + 8 * 11] ^= 1
    t = tensorloupe.open(MemorySource(bytes(corrupt), "edited.h5")).tensor("extensible/plain")
    with pytest.raises(FormatError, match=r"page 1 of a data block of the extensible array of dataset "
                                          r"'extensible/plain' fails its checksum"):
        tensorloupe.values(t, hdf5_files.EA_PAGED_START + 3 * 2048 + 1030, 10)
    assert tensorloupe.values(t, hdf5_files.EA_PAGED_START, 5) == ref[hdf5_files.EA_PAGED_START:][:5].tolist()


def test_a_fixed_array_is_numbered_over_its_maximum_shape(tmp_path):
    # a fixed maxshape above the shape: HDF5 sizes and numbers the array by the maximum's chunk
    # grid (H5D__farray's max_down_chunks), so 40 x 60 entries (paged) for 30 x 50 chunks
    path = tmp_path / "max.h5"
    with h5py.File(path, "w", libver="latest") as f:
        f.create_dataset("small", data=np.arange(30).reshape(5, 6), maxshape=(9, 10), chunks=(2, 2))
        f.create_dataset("paged", data=np.arange(3000, dtype="i2").reshape(30, 100), maxshape=(40, 120),
                         chunks=(1, 2), compression="gzip")
    ck = tensorloupe.open(path)
    with h5py.File(path) as f:
        for name in ("small", "paged"):
            t = ck.tensor(name)
            assert t.info["index"] == "fixed-array"
            assert tensorloupe.values(t, 0, t.numel) == f[name][()].ravel().tolist(), name
    assert fixed_array(path.read_bytes(), ck.tensor("paged").source.layout.address)[1] == 40 * 60
