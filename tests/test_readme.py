"""The README is laid out the way issue 27 asked, and what it says is true of the repository.

It starts with two commands (build and serve the app; run the tests), and CI runs that same test
command. Then what a user does: a 5-line quick start (the page, pip install, `tensorloupe inspect`,
`health`, `diff`), a screenshot that a browser test keeps true, the hosted app's address as the
Pages workflow publishes it, the prerequisites (Python as pyproject.toml requires it, Node/npm),
the features by task, and only then the internals. Every file it links to or names exists.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
if not README.exists():   # the Pyodide run mounts tests/ alone: the repository's files are not there
    pytest.skip("the repository's README is not beside these tests", allow_module_level=True)
PAGES = ".github/workflows/pages.yml"
# The README's internals: its development section (the code layout is in docs/development.md).
INTERNALS = "## Development"
FEATURES = "## What you can do"


def readme() -> str:
    return README.read_text(encoding="utf-8")


def lines() -> list[str]:
    return readme().splitlines()


def headings() -> list[tuple[int, str]]:
    """(line index, text) of every heading, code blocks left out (a `#` comment is none)."""
    out, fenced = [], False
    for i, line in enumerate(lines()):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            out.append((i, line.strip()))
    return out


def heading_line(text: str) -> int:
    found = [i for i, h in headings() if h == text]
    assert found, f"the README has no heading {text!r}: {[h for _, h in headings()]}"
    return found[0]


def section(text: str) -> str:
    """The README's text under heading `text`, up to the next heading of the same or a higher level."""
    start = heading_line(text)
    level = len(text) - len(text.lstrip("#"))
    end = next((i for i, h in headings() if i > start and len(h) - len(h.lstrip("#")) <= level),
               len(lines()))
    return "\n".join(lines()[start + 1:end])


def code_blocks(text: str) -> list[str]:
    return re.findall(r"^```[a-z]*\n(.*?)^```", text, re.S | re.M)


def commands(block: str) -> list[str]:
    """The commands of a shell code block, their `#` comments left out."""
    out = []
    for line in block.splitlines():
        tokens = shlex.split(line, comments=True)
        if tokens:
            out.append(shlex.join(tokens))
    return out


def first_line_of(needle: str) -> int:
    for i, line in enumerate(lines()):
        if needle in line:
            return i
    raise AssertionError(f"the README never says {needle!r}")


def cli_commands() -> set[str]:
    from tensorloupe.cli import build_parser
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return set(sub.choices)


# --- the first two commands ----------------------------------------------------------------------

def test_the_readme_starts_with_the_serve_and_the_test_command():
    text = lines()
    assert text[0].startswith("# ")
    first = next(i for i, line in enumerate(text[1:], 1) if line.strip())
    assert text[first].startswith("```"), "the README does not start with its commands"
    block = code_blocks(readme())[0]
    found = [shlex.split(c) for c in commands(block)]
    assert len(found) == 2, f"the first code block is not two commands: {commands(block)}"
    serve, test = found
    assert serve[:3] == ["python3", "build.py", "serve"], f"the first command is {commands(block)[0]}"
    assert all(a in ("[FILE", "...]") for a in serve[3:]), f"the serve command is {commands(block)[0]}"
    assert test == ["bash", "test.sh"], f"the second command is {commands(block)[1]}"
    # Both are real: build.py has a `serve` command, and test.sh is at the root.
    built = subprocess.run([sys.executable, "build.py", "--help"], cwd=ROOT, capture_output=True,
                           text=True, timeout=60)
    assert built.returncode == 0 and "serve" in built.stdout
    assert (ROOT / "test.sh").is_file()


def test_ci_execs_the_readme_test_command():
    test_command = shlex.split(commands(code_blocks(readme())[0])[1])
    run = (ROOT / ".ci" / "run").read_text()
    execs = [line.strip() for line in run.splitlines() if line.strip().startswith("exec ")]
    assert len(execs) == 1, f".ci/run does not exec one command: {execs}"
    ran = shlex.split(execs[0])[1:]
    assert ran[:len(test_command)] == test_command, f".ci/run execs {ran}, the README says {test_command}"
    assert all(extra.startswith("-") for extra in ran[len(test_command):]), \
        f"besides the README's command, .ci/run adds more than options: {ran}"
    assert re.search(r'^cd "\$\(dirname "\$0"\)/\.\."', run, re.M), ".ci/run does not run at the root"


# --- the quick start -----------------------------------------------------------------------------

def quick_start() -> list[str]:
    blocks = code_blocks(section("## Quick start"))
    assert blocks, "the Quick start has no code block"
    return commands(blocks[0])


def test_the_quick_start_comes_early_and_before_the_internals():
    at = heading_line("## Quick start")
    assert at < 40, f"the Quick start starts on line {at + 1}"
    assert at < heading_line(FEATURES) < heading_line(INTERNALS)


def test_the_quick_start_is_the_five_steps_in_order():
    steps = [shlex.split(c) for c in quick_start()]
    assert len(steps) == 5, f"the quick start is not 5 lines: {quick_start()}"
    assert steps[0][:3] == ["python3", "build.py", "serve"], f"step 1 is {quick_start()[0]}"
    assert steps[1][:2] == ["pip", "install"], f"step 2 is {quick_start()[1]}"
    assert [s[:2] for s in steps[2:]] == [["tensorloupe", "inspect"], ["tensorloupe", "health"],
                                          ["tensorloupe", "diff"]], f"steps 3-5 are {quick_start()[2:]}"
    # pip installs this checkout, which is where the `tensorloupe` command comes from.
    target = steps[1][-1]
    assert (ROOT / target / "pyproject.toml").is_file(), f"`pip install {target}` is no project"
    project = tomllib.loads((ROOT / target / "pyproject.toml").read_text())["project"]
    assert "tensorloupe" in project["scripts"]


def test_every_command_the_quick_start_names_is_a_real_subcommand():
    from tensorloupe.cli import build_parser
    real = cli_commands()
    named = [shlex.split(c) for c in quick_start() if c.startswith("tensorloupe ")]
    assert named
    for argv in named:
        assert argv[1] in real, f"`tensorloupe {argv[1]}` is no subcommand ({sorted(real)})"
        try:
            build_parser().parse_args(argv[1:])     # and the line as written parses
        except SystemExit:
            pytest.fail(f"`{shlex.join(argv)}` is no valid command line")
    # The CLI's own --help lists them too.
    shown = subprocess.run([sys.executable, "-m", "tensorloupe.cli", "--help"], cwd=ROOT,
                           env={"PYTHONPATH": str(ROOT / "pylib"), "PATH": "/usr/bin:/bin"},
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    for argv in named:
        assert re.search(rf"^\s+{argv[1]}\s", shown.stdout, re.M)


# --- the screenshot ------------------------------------------------------------------------------

def images() -> list[str]:
    return re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", readme())


def test_the_screenshot_exists_and_is_a_png():
    shots = images()
    assert shots, "the README shows no picture"
    path = ROOT / shots[0]
    assert path.is_file(), f"{shots[0]} is not in the repository"
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{shots[0]} is no PNG"
    assert data[12:16] == b"IHDR"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width >= 800 and height >= 500, f"{shots[0]} is {width} × {height}: no page screenshot"
    # It is shown near the top, before the features.
    assert first_line_of(f"]({shots[0]})") < heading_line(FEATURES)


def test_the_screenshot_is_made_by_the_browser_test():
    shot = images()[0]
    test = ROOT / "tests" / "browser" / "test_readme_screenshot.py"
    assert test.is_file()
    assert "tests/browser/test_readme_screenshot.py" in readme(), "the README does not say what makes it"
    spec = importlib.util.spec_from_file_location("readme_screenshot_test", test)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.SCREENSHOT == ROOT / shot, f"the browser test writes {module.SCREENSHOT}, the README shows {shot}"
    source = test.read_text()
    assert "SCREENSHOT.write_bytes(" in source
    assert f'"]({shot})" in readme' in source, "the browser test does not check the README shows it"
    assert any(name.startswith("test_") and callable(getattr(module, name)) for name in dir(module))


# --- the hosted app ------------------------------------------------------------------------------

def test_the_hosted_address_is_the_pages_workflows():
    text = readme()
    assert f"`{PAGES}`" in text, "the README does not name the Pages workflow"
    workflow = (ROOT / PAGES).read_text()
    # It publishes dist/: the upload step's path, deployed to the github-pages environment.
    upload = re.search(r"uses: actions/upload-pages-artifact@\S+\n\s+with:\n\s+path: (\S+)", workflow)
    assert upload, "the workflow has no upload-pages-artifact step with a path"
    assert upload.group(1).rstrip("/") == "dist"
    assert re.search(r"uses: actions/deploy-pages@", workflow)
    assert re.search(r"name: github-pages", workflow)
    assert re.search(r"run: python3? build\.py\s*$", workflow, re.M), "the workflow does not build dist/"
    sys.path.insert(0, str(ROOT))
    try:
        import build
    finally:
        sys.path.remove(str(ROOT))
    assert build.DEFAULT_OUT.resolve() == (ROOT / "dist").resolve()
    # What the README says about it: dist/, on pushes to main, at GitHub Pages' project address.
    hosted = text[text.index(f"`{PAGES}`"):text.index("## Prerequisites")]
    assert "`dist/`" in hosted
    assert re.search(r"branches: \[main\]", workflow) and "`main`" in hosted
    address = re.search(r"https://(\S+?)\.github\.io/(\S+?)/", hosted)
    assert address, "the README gives no https://<owner>.github.io/<repository>/ address"
    assert address.group(0).rstrip("`") == "https://<owner>.github.io/<repository>/" or \
        re.fullmatch(r"https://[A-Za-z0-9-]+\.github\.io/[A-Za-z0-9._-]+/", address.group(0))
    assert heading_line("## Quick start") < first_line_of(PAGES) < heading_line(FEATURES)


# --- prerequisites -------------------------------------------------------------------------------

def test_the_prerequisites_are_python_as_pyproject_requires_and_node():
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    minimum = re.fullmatch(r">=\s*(\d+\.\d+)", requires.strip())
    assert minimum, f"requires-python is {requires!r}"
    prerequisites = section("## Prerequisites")
    stated = re.search(r"Python (?:≥|>=) ?(\d+\.\d+)", prerequisites)
    assert stated, "the prerequisites do not say which Python"
    assert stated.group(1) == minimum.group(1), \
        f"the README says Python ≥ {stated.group(1)}, pyproject.toml requires {requires}"
    items = re.findall(r"^- (.+)$", prerequisites, re.M)
    assert any(re.match(r"\*\*Node(?:\.js)? and npm\*\*", item) for item in items), \
        f"no prerequisite names Node and npm: {items}"
    # The Node version it names is the one the Pages workflow builds with.
    node = re.search(r"Node (\d+)", prerequisites)
    if node:
        assert re.search(rf"node-version: {node.group(1)}\b", (ROOT / PAGES).read_text())
    assert heading_line("## Quick start") < heading_line("## Prerequisites") < heading_line(FEATURES)


# --- the features by task, then the internals ----------------------------------------------------

def test_the_features_by_task_come_before_the_internals():
    features = heading_line(FEATURES)
    assert features < heading_line(INTERNALS)
    for i, h in headings():
        if re.search(r"internals|code layout|architecture of|how it works|development", h, re.I):
            assert i > features, f"{h!r} comes before the features"
    tasks = re.findall(r"^\*\*(.+?)\*\*", section(FEATURES), re.M)
    for task in ("What model is it", "Is a tensor broken", "What changed between two checkpoints",
                 "Is it safe to load"):
        assert any(t.startswith(task) for t in tasks), f"no feature for the task {task!r}: {tasks}"
    # The internals live in docs/development.md, which the README links to.
    assert "](docs/development.md)" in readme()
    assert "## Code layout" in (ROOT / "docs" / "development.md").read_text()


def links() -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", readme())


def test_every_docs_page_the_readme_links_to_exists():
    pages = [t.split("#")[0] for t in links() if t.startswith("docs/") and t.split("#")[0].endswith(".md")]
    assert pages, "the README links to no docs/ page"
    for target in pages:
        assert (ROOT / target).is_file(), f"the README links to {target}, which does not exist"


def test_every_repository_file_the_readme_links_to_or_names_exists():
    local = [t.split("#")[0] for t in links() if not re.match(r"[a-z]+:", t) and not t.startswith("#")]
    assert local
    for target in local:
        assert target and (ROOT / target).exists(), f"the README links to {target}, which does not exist"
    # Paths in backticks that start at a top-level entry of the repository (`bench/fuzz.py`,
    # `tests/browser/...`, `.github/workflows/pages.yml`, `build.py`) name real files too.
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    top = {p.split("/")[0] for p in tracked} or {p.name for p in ROOT.iterdir()}
    named = {t for t in re.findall(r"`([^`\s]+)`", readme())
             if t.split("/")[0] in top and ("/" in t or "." in t)}
    assert PAGES in named and "bench/fuzz.py" in named
    for path in named:
        assert (ROOT / path).exists(), f"the README names `{path}`, which does not exist"
