"""The package's shape: no import cycle, and no module imports from a layer above its own.

Walks every module's import statements (top-level and inside functions) with `ast`, resolves
relative imports, and checks them against the layer table below. A new module must be given a
layer here, which is the point: where it sits is a decision, not an accident.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "pylib" / "tensorloupe"

# Lowest first. A module may import from its own layer or any lower one (never upward).
LAYERS = [
    ["errors", "jsonable", "display", "progress"],
    ["source", "dtypes", "unpickling"],
    ["model", "roles", "quant"],  # quant: dequantising decoders over dtypes, used by the sampler
    ["formats"],
    ["opening", "adapters"],  # adapters: ΔW of LoRA pairs over quant's RowsSource, config found beside
    ["sampler", "colormap"],
    ["moe", "namemap", "tokens", "report", "npy", "synthetic", "writing", "notebook"],
    ["architecture", "healthscan", "comparison"],
    ["cli", "web", "tensorloupe"],  # "tensorloupe" is the package's own __init__ (the public API)
]
ROOT_MODULES_AT_MOST = 11   # the API, the vocabulary and the renderings; every job has a folder
LAYER_OF = {name: i for i, names in enumerate(LAYERS) for name in names}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Absolute names of the tensorloupe modules `path` imports (`from . import x` counts x)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("tensorloupe"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.startswith("tensorloupe"):
                target = node.module
            else:
                continue
            for alias in node.names:  # `from .formats import safetensors` imports a module,
                candidate = f"{target}.{alias.name}"  # `from .errors import X` a name of one
                path = PACKAGE.parent / candidate.replace(".", "/")
                found.add(candidate if path.with_suffix(".py").exists() or path.is_dir() else target)
    found.discard(name)
    return found


def all_modules() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in sorted(PACKAGE.rglob("*.py"))}


def layer(module: str) -> int:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else "tensorloupe"
    assert top in LAYER_OF, f"{module} has no layer in tests/test_layering.py: give it one"
    return LAYER_OF[top]


def test_no_module_imports_from_a_layer_above_it():
    upward = [f"{m} (layer {layer(m)}) imports {i} (layer {layer(i)})"
              for m, targets in all_modules().items() for i in targets
              if layer(i) > layer(m)]
    assert upward == []


def test_no_import_cycle():
    graph = all_modules()
    # A package's __init__ importing its own submodules is how a package is assembled, and a
    # submodule importing the package would be the cycle: so both directions stay in the graph.
    state: dict[str, int] = {}
    cycles = []

    def visit(node, stack):
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for node in graph:
        if node not in state:
            visit(node, [node])
    assert cycles == []


def test_no_module_is_named_like_torch_pickle_a_builtin_or_an_api_function():
    # `import torch` in a test must reach the oracle; `from . import zip` would hide the builtin
    # in the importing module; a subpackage named like one of the API's functions would replace
    # that function on the package when it is imported (Python sets the parent's attribute).
    import builtins

    import tensorloupe
    api = {name for name in tensorloupe.__all__ if name[0].islower()}
    names = {p.name for p in PACKAGE.rglob("*") if p.is_dir() and p.name != "__pycache__"} | \
        {p.stem for p in PACKAGE.rglob("*.py") if p.stem != "__init__"}
    assert sorted(names & ({"torch", "pickle"} | set(dir(builtins)) | api)) == []


def test_the_package_root_holds_only_the_api_the_vocabulary_and_the_renderings():
    root = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
    assert len(root) <= ROOT_MODULES_AT_MOST, root


def test_the_walker_sees_imports():
    """The checks above would pass on an empty graph: make sure the walk finds real edges."""
    graph = all_modules()
    assert "tensorloupe.dtypes.ggml" in graph["tensorloupe.formats.gguf.reader"]
    assert "tensorloupe.errors" in graph["tensorloupe.model"]
    assert "tensorloupe.formats.pytorch.zipped" in graph["tensorloupe.opening.detect"]
