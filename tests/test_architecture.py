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
TOP = "__init__"  # the package's own `__init__`: what `import gradcam_cli` and `from gradcam_cli import NAME` run

LAYERS: list[tuple[str, set[str]]] = [
    ("leaves", {"errors", "vocab", "values", "option_table", "option_words", "settings", "model.state", "version", "timings", "found"}),
    ("models", {"model", "model.*"}),
    ("tensors and pixels", {"layout", "layout_3d", "geometry", "maps"}),
    ("layers", {"layers", "layers.*"}),
    ("extraction", {"extract", "extract.*"}),
    ("methods", {"cams", "cams.targets", "cams.detections", "cams.segments", "cams.methods", "cams.methods.*"}),
    ("maps from tensors", {"cams.augment", "cams.engine"}),
    ("evaluation", {"evaluate", "evaluate.*"}),
    ("files", {"inputs", "inputs.*", "outputs", "outputs.*"}),
    ("a prepared run", {"run.tasks", "run.matching", "run.prepare"}),  # above files: reference images are read to prepare
    ("the report", {"report", "report.*"}),
    ("the Python API", {"api_results", "api_arguments", "api_detections", "api_segments", "api"}),
    ("integrations", {"integrations", "integrations.*"}),
    ("the engine", {"run", "run.*"}),
    ("the command line", {"cli", "cli.*", "__main__", TOP}),
]


def _module_name(path: Path, package: Path = PACKAGE) -> str:
    """`run.prepare` for gradcam_cli/run/prepare.py, `run` for gradcam_cli/run/__init__.py, TOP for gradcam_cli/__init__.py."""
    parts = path.relative_to(package).with_suffix("").parts
    parts = parts[:-1] if parts[-1] == "__init__" else parts
    return ".".join(parts) or TOP


def _imports(path: Path, modules: set[str], package: Path = PACKAGE) -> set[str]:
    """The package's modules this file imports, anywhere in it, the package itself (TOP) included.

    `from X import NAME` imports the submodule X.NAME where there is one, else X itself:
    `from gradcam_cli import __version__` runs gradcam_cli/__init__.py, so it is an import of TOP.
    """
    name = _module_name(path, package)
    here = list(path.relative_to(package).parts[:-1])  # the package a relative import starts from
    found: set[str] = set()

    def add(dotted: str) -> None:
        module = dotted or TOP
        if module in modules and module != name:
            found.add(module)

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            elif node.module == "gradcam_cli" or (node.module or "").startswith("gradcam_cli."):
                target = (node.module or "").removeprefix("gradcam_cli").lstrip(".")
            else:
                continue
            for alias in node.names:
                submodule = f"{target}.{alias.name}".lstrip(".")
                add(submodule if submodule in modules else target)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "gradcam_cli" or alias.name.startswith("gradcam_cli."):
                    add(alias.name.removeprefix("gradcam_cli").lstrip("."))
    return found


def _graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    files = {_module_name(p, package): p for p in package.rglob("*.py")}
    return {name: _imports(path, set(files), package) for name, path in files.items()}


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


def test_the_import_reader_sees_the_package_itself(tmp_path: Path) -> None:
    """`from gradcam_cli import __version__` imports gradcam_cli/__init__.py: a cycle through it is still a cycle.

    A package in a temporary folder with every spelling of an import; the reader must see each edge.
    """
    package = tmp_path / "gradcam_cli"
    files = {
        "__init__.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from gradcam_cli.api import cam\n",
        "version.py": "__version__ = '1'\n",
        "api.py": "def cam():\n    from gradcam_cli.run import prepare\n",
        "run/__init__.py": "from . import prepare\n",
        "run/prepare.py": "from gradcam_cli import __version__\nimport gradcam_cli\nfrom .. import version\nfrom ..run import other\n",
        "run/other.py": "import gradcam_cli.version\nfrom gradcam_cli.run import VALUE\n",
    }
    for name, text in files.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text, encoding="utf-8")
    assert _graph(package) == {
        TOP: {"api"},
        "version": set(),
        "api": {"run.prepare"},
        "run": {"run.prepare"},
        "run.prepare": {TOP, "version", "run.other"},
        "run.other": {"version", "run"},
    }


def test_imports_only_point_down_the_layers() -> None:
    upward = [
        f"{module} ({LAYERS[_layer_of(module)][0]}) imports {target} ({LAYERS[_layer_of(target)][0]})"
        for module, targets in sorted(_graph().items())
        for target in sorted(targets)
        if _layer_of(target) > _layer_of(module)
    ]
    assert not upward, "imports against the layer order:\n" + "\n".join(upward)


# What inputs/ and outputs/ may import besides each other: plain values and pixels, never a model.
# cams.methods.base is there for the method names in output file names (until they come from vocab); timings for
# the stamp of the first picture written.
FILES_MAY_IMPORT = {
    "errors", "vocab", "values", "option_table", "settings", "geometry", "maps", "layout", "cams.methods.base", "timings", "found",
    "evaluate.overlap",  # the overlap figures (IoU, Dice) a segmenter's records say and eval measures: numpy only
}  # fmt: skip


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
            f"gradcam_cli.{module} imports gradcam_cli.{target}"
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
