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
    ("leaves", {"errors", "vocab", "values", "option_table", "settings", "model.state"}),
    ("models", {"model", "model.*"}),
    ("tensors and pixels", {"layout", "geometry", "maps"}),
    ("layers", {"layers", "layers.*"}),
    ("extraction", {"extract", "extract.*"}),
    ("methods", {"cams", "cams.targets", "cams.methods", "cams.methods.*"}),
    ("maps from tensors", {"cams.augment", "cams.engine"}),
    ("evaluation", {"evaluate", "evaluate.*"}),
    ("a prepared run", {"run.prepare"}),
    ("files", {"inputs", "inputs.*", "outputs", "outputs.*"}),
    ("the report", {"report", "report.*"}),
    ("the Python API", {"api_results", "api"}),
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
                cycle = path[path.index(target) :] + [target] if target in path else [module, target]
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
        for module, targets in sorted(_graph().items())
        for target in sorted(targets)
        if target and _layer_of(target) > _layer_of(module)
    ]
    assert not upward, "imports against the layer order:\n" + "\n".join(upward)


# What inputs/ and outputs/ may import besides each other: plain values and pixels, never a model.
# cams.methods.base is there for the method names in output file names (until they come from vocab).
FILES_MAY_IMPORT = {"errors", "vocab", "values", "option_table", "settings", "geometry", "maps", "layout", "cams.methods.base"}


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(f"{package}.")


def test_inputs_and_outputs_know_files_not_models() -> None:
    """inputs/ and outputs/ import no model, layer, extraction, engine, run or CLI module, even under TYPE_CHECKING.

    outputs/ may import inputs/ (it opens files the way inputs do, and names
    outputs with the inputs' name limits); inputs/ never imports outputs/, so
    reading images needs nothing of how results are written. Direct imports
    only: what an allowed module imports is that module's own layer's business.
    """
    breaking = []
    for module, targets in sorted(_graph().items()):
        own = ["inputs"] if _within(module, "inputs") else ["inputs", "outputs"] if _within(module, "outputs") else None
        if own is None:
            continue
        breaking += [
            f"gradcam_cli.{module} imports gradcam_cli.{target or '__init__'}"
            for target in sorted(targets)
            if target not in FILES_MAY_IMPORT and not any(_within(target, package) for package in own)
        ]
    assert not breaking, (
        "outputs know files, not models: inputs/ and outputs/ may import only "
        f"{', '.join(sorted(FILES_MAY_IMPORT))} and each other (outputs/ → inputs/, never inputs/ → outputs/); "
        "these imports break that:\n" + "\n".join(breaking)
    )


def test_the_architecture_document_lists_these_layers_in_this_order() -> None:
    """docs/ARCHITECTURE.md is kept true: its layer table has the same layers, in the same order."""
    document = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    rows = [line.split("|")[1].strip() for line in document.splitlines() if line.startswith("| ") and not line.startswith("| layer ")]
    assert rows == [name for name, _ in LAYERS]
