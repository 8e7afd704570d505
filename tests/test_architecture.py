"""The package's imports point one way: no cycle at all, and no module imports one from a higher layer.

Every import counts, also those inside functions and under TYPE_CHECKING: a
cycle hidden behind a function-local import is still a cycle a reader has to
untangle. The layers below are the architecture (docs/ARCHITECTURE.md), from
the leaves up; a module may import from its own layer or any layer below.
"""
from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "gradcam_cli"

LAYERS: list[tuple[str, set[str]]] = [
    ("leaves", {"errors", "model.state"}),
    ("models", {"model", "model.*"}),
    ("tensors and pixels", {"layout", "geometry", "maps"}),
    ("layers", {"layers", "layers.*"}),
    ("extraction", {"extract", "extract.*"}),
    ("methods", {"cams", "cams.targets", "cams.methods", "cams.methods.*"}),
    ("maps from tensors", {"cams.augment", "cams.engine"}),
    ("the Python API", {"api"}),
    ("files", {"inputs", "inputs.*", "outputs", "outputs.*"}),
    ("the engine", {"run", "run.*"}),
    ("the command line", {"cli", "cli.*", "__main__", "__init__"}),
]


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    name = ".".join(parts)
    return name[: -len(".__init__")] if name.endswith(".__init__") else name


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The package's modules this file imports, anywhere in it."""
    name = _module_name(path)
    package = name.split(".")[:-1] if path.name != "__init__.py" else name.split(".")
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[: len(package) - node.level + 1]
            target = ".".join([*base, *([node.module] if node.module else [])])
            for candidate in [target, *(f"{target}.{alias.name}".lstrip(".") for alias in node.names)]:
                if candidate in modules and candidate != name:
                    found.add(candidate)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gradcam_cli"):
            target = (node.module or "").removeprefix("gradcam_cli").lstrip(".")
            for candidate in [target, *(f"{target}.{alias.name}".lstrip(".") for alias in node.names)]:
                if candidate in modules and candidate != name:
                    found.add(candidate)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("gradcam_cli."):
                    found.add(alias.name.removeprefix("gradcam_cli."))
    return found


def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(files) | {""}
    return {name: _imports(path, modules) for name, path in files.items()}


def _layer_of(module: str) -> int:
    for index, (_, members) in enumerate(LAYERS):
        if module in members or any(m.endswith(".*") and module.startswith(m[:-1]) for m in members):
            return index
    raise AssertionError(f"gradcam_cli.{module} is in no layer of tests/test_architecture.py; give it its place")


def test_no_import_cycle() -> None:
    graph = _graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                cycle = path[path.index(target):] + [target] if target in path else [module, target]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


def test_imports_only_point_down_the_layers() -> None:
    upward = [
        f"{module} ({LAYERS[_layer_of(module)][0]}) imports {target} ({LAYERS[_layer_of(target)][0]})"
        for module, targets in sorted(_graph().items()) for target in sorted(targets)
        if target and _layer_of(target) > _layer_of(module)
    ]
    assert not upward, "imports against the layer order:\n" + "\n".join(upward)
