"""The Tensor tab's offset chip says what it is (issue 27: "the "@ 15,080" chip has no label"):
"at byte N", N the tensor's absolute data offset in the file, grouped with commas, with a tooltip
that explains it. Checked as a user sees it, against the offsets the file itself gives, and no
request leaves the page's own origin."""

from __future__ import annotations

import json
import struct
from urllib.parse import urlsplit

import numpy as np
import pytest
from safetensors.numpy import save_file


@pytest.fixture(scope="module")
def offsets_file(tmp_path_factory):
    """Three tensors, the last one more than a million bytes in (two commas in its offset)."""
    path = tmp_path_factory.mktemp("offset-chip") / "offsets.safetensors"
    rng = np.random.default_rng(27)
    save_file({"a.big.weight": rng.normal(0, 1, (512, 640)).astype(np.float32),      # 1,310,720 B
               "b.mid.weight": rng.normal(0, 1, (40, 30)).astype(np.float32),
               "c.small.bias": rng.normal(0, 1, (16,)).astype(np.float32)}, str(path))
    return path


def absolute_offsets(path) -> dict[str, int]:
    """8 + the header's length + each tensor's data_offsets start: where its first byte is."""
    data = path.read_bytes()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_len])
    return {name: 8 + header_len + entry["data_offsets"][0]
            for name, entry in header.items() if name != "__metadata__"}


def origin(url: str) -> tuple:
    parts = urlsplit(url)
    return parts.scheme, parts.hostname, parts.port


def test_the_offset_chip_says_at_byte_and_the_real_offset(page_factory, server, offsets_file):
    offsets = absolute_offsets(offsets_file)
    assert max(offsets.values()) > 1_000_000          # the file is made to need two commas
    context, app, requests, errors = page_factory(server)
    try:
        app.goto()
        app.open_file(offsets_file)
        shown = {}
        for name in sorted(offsets, key=offsets.get, reverse=True):
            app.select(name)
            app.tab("tensor")
            chip = app.page.locator("#tensor-facts .chip.offset")
            assert chip.count() == 1
            assert chip.is_visible()
            shown[name] = (chip.inner_text(), chip.get_attribute("title"),
                           chip.get_attribute("aria-label"))
    finally:
        context.close()
    assert not errors, f"uncaught errors in the page: {errors}"
    for name, (text, title, label) in shown.items():
        assert text == f"at byte {offsets[name]:,}", f"{name}: the chip reads {text!r}"
        # The tooltip (and the accessible name, as the chip has no aria-label) explains it.
        explanation = label or title
        assert explanation and "byte offset" in explanation and "first element" in explanation, \
            f"{name}: the chip's tooltip is {title!r}"
    assert shown[max(offsets, key=offsets.get)][0].count(",") == 2
    # Every request the page made (page, workers, service worker) went to its own origin.
    assert requests.urls, "no request was recorded at all"
    network = [u for u in requests.urls if urlsplit(u).scheme not in ("data", "blob", "about")]
    foreign = [u for u in network if origin(u) != origin(server)]
    assert not foreign, f"requests outside {server}: {foreign}"
