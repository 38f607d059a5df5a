"""How the page looks at a phone's width, a laptop's and a desktop's, and in the dark: usable
header, no word broken mid-word in the summary cards, the histogram on screen at 1024x700, a
dark theme that follows the system. Screenshots land in test-artifacts/ (look at them)."""

from conftest import ARTIFACTS, STEP_TIMEOUT_MS, VIEWPORT

TENSOR = "model.layers.0.block_sparse_moe.experts.0.w2.weight"

# Every word of the summary cards on one line: a Range over each word has one client rect.
BROKEN_WORDS = """() => {
  const broken = [];
  for (const value of document.querySelectorAll('#panel-summary .fact-value, #panel-summary .fact-label')) {
    const walker = document.createTreeWalker(value, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const re = /\\S+/g;
      for (let m = re.exec(node.data); m; m = re.exec(node.data)) {
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const lines = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
        if (lines.size > 1) broken.push(m[0]);
      }
    }
  }
  return broken;
}"""


def shot(app, name):
    ARTIFACTS.mkdir(exist_ok=True)
    app.page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


# Elements that overflow the viewport's width (outside a horizontal scroller of their own).
OUTSIDE = """(width) => [...document.querySelectorAll('body *')].filter((e) => {
  const r = e.getBoundingClientRect();
  if (!r.width || r.right <= width + 0.5 || getComputedStyle(e).position === 'fixed') return false;
  for (let p = e.parentElement; p; p = p.parentElement) {
    if (['auto', 'scroll'].includes(getComputedStyle(p).overflowX)) return false;
  }
  return true;
}).map((e) => e.id || e.className || e.tagName)"""

# Every size in the tree's rows is whole (its text is not cut with an ellipsis).
CUT_SIZES = """() => [...document.querySelectorAll('.tree-row .meta')]
  .filter((m) => m.scrollWidth > m.clientWidth + 1).map((m) => m.textContent)"""


def test_phone_width_header_usable_and_nothing_cut(app):
    page = app.page
    try:
        page.set_viewport_size({"width": 390, "height": 844})
        app.tab("summary")
        assert page.evaluate(OUTSIDE, 390) == []
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        for selector in ('label[for="file-input"]', 'label[for="folder-input"]', "#status", "#current-file"):
            box = page.locator(selector).bounding_box()
            assert box and box["x"] >= 0 and box["x"] + box["width"] <= 390 + 0.5, (selector, box)
        assert page.evaluate(BROKEN_WORDS) == []
        # The sidebar is folded under its button: header and sidebar take a fifth of the height
        # at most (they took 56%), and the footer follows the content instead of being fixed.
        assert page.get_attribute("#sidebar-toggle", "aria-expanded") == "false"
        assert not page.is_visible("#tree") and not page.is_visible("#url-input")
        tabs = page.locator("#tabs").bounding_box()
        assert tabs["y"] <= 844 * 0.2, tabs
        for box in page.eval_on_selector_all("#tabs [role=tab]", "ts => ts.map(t => t.getBoundingClientRect().toJSON())"):
            assert 0 <= box["x"] and box["right"] <= 390 + 0.5, box       # every tab on screen
        footer = page.locator("footer.footer").bounding_box()
        panel = page.locator("#panel-summary").bounding_box()
        assert footer["y"] >= panel["y"] + panel["height"] - 1 and footer["y"] > 844 * 0.9
        assert page.evaluate(OUTSIDE, 390) == []
        shot(app, "looks-390-summary")
        # Choosing a tensor: open the sidebar, pick it, and it folds away again
        page.click("#sidebar-toggle")
        assert page.is_visible("#tree") and page.get_attribute("#sidebar-toggle", "aria-expanded") == "true"
        assert page.evaluate(CUT_SIZES) == []
        app.select(TENSOR)
        assert page.get_attribute("#sidebar-toggle", "aria-expanded") == "false" and not page.is_visible("#tree")
        app.tab("tensor")
        assert page.evaluate(OUTSIDE, 390) == []
        shot(app, "looks-390-tensor")
        app.tab("moe")                  # the Experts tab, its analysis run: the grid of experts
        page.wait_for_selector("#moe-cost[data-total-bytes]", timeout=STEP_TIMEOUT_MS)
        page.click("#moe-run")
        page.wait_for_selector("#redundancy[data-state=done]", timeout=STEP_TIMEOUT_MS)
        page.wait_for_selector("#moe-grid", state="attached")
        app.wait_idle()
        assert page.evaluate(OUTSIDE, 390) == []
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        shot(app, "looks-390-experts")
    finally:
        page.set_viewport_size(VIEWPORT)


def test_desktop_cards_never_break_a_word(app):
    page = app.page
    for width in (1400, 1180, 960):
        page.set_viewport_size({"width": width, "height": 900})
        app.tab("summary")
        assert page.evaluate(BROKEN_WORDS) == [], width
        assert page.evaluate(CUT_SIZES) == [], width
        assert not page.is_visible("#sidebar-toggle")       # a phone's button only
    page.set_viewport_size(VIEWPORT)
    shot(app, "looks-1400-summary")
    app.select(TENSOR)
    app.tab("tensor")
    shot(app, "looks-1400-tensor")


def test_histogram_visible_without_scrolling_at_1024x700(app):
    page = app.page
    try:
        page.set_viewport_size({"width": 1024, "height": 700})
        app.select(TENSOR)
        app.tab("tensor")
        page.wait_for_function("() => document.getElementById('histogram').dataset.bins")
        box = page.locator("#histogram").bounding_box()
        assert box["height"] > 50 and box["y"] >= 0 and box["y"] + box["height"] <= 700, box
        assert page.evaluate("document.querySelector('#panel-tensor, main').scrollTop || 0") == 0
        shot(app, "looks-1024x700-tensor")
    finally:
        page.set_viewport_size(VIEWPORT)


def luminance(css: str) -> float:
    r, g, b = (int(v) for v in css[css.index("(") + 1:css.index(")")].split(",")[:3])
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255


def test_dark_theme_follows_the_system(app):
    page = app.page
    body = "getComputedStyle(document.body).backgroundColor"
    card = "getComputedStyle(document.querySelector('#panel-summary .fact')).backgroundColor"
    ink = "getComputedStyle(document.querySelector('#panel-summary .fact-value')).color"
    app.tab("summary")
    assert luminance(page.evaluate(body)) > 0.8
    try:
        page.emulate_media(color_scheme="dark")
        page.wait_for_function(f"() => {body} !== 'rgb(245, 246, 248)'")
        assert luminance(page.evaluate(body)) < 0.15 and luminance(page.evaluate(card)) < 0.15
        assert luminance(page.evaluate(ink)) > 0.7            # light text on the dark cards
        shot(app, "looks-dark-summary")
        app.select(TENSOR)
        app.tab("tensor")
        stats = "getComputedStyle(document.getElementById('stats')).backgroundColor"
        chip = "getComputedStyle(document.querySelector('#tensor-facts .chip')).backgroundColor"
        assert luminance(page.evaluate(stats)) < 0.15 and luminance(page.evaluate(chip)) < 0.2
        shot(app, "looks-dark-tensor")
    finally:
        page.emulate_media(color_scheme="light")
