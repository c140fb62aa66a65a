"""The lines between the plug-in, its commands and the research harness (read from the source
with ``ast``; nothing is imported). The plug-in (``fairseq_shared/``, what the wheel ships) never
imports the harness (``harness/``, run from the checkout); its packages import only packages of
their own layer's rank or below (:data:`LAYERS`); and no library package imports a command."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "fairseq_shared"
HARNESS = "harness"
COMMANDS = "fairseq_shared.cli"
#: The plug-in's layers, lowest first: a module imports only its own package and lower ranks.
#: Rank 0 is the package's own modules (errors, checkpoint_io, compat, scoring, subsets, ...);
#: data and export are siblings (corpora and exports of a trained model); timing decodes exports;
#: distill translates a corpus with an exported teacher; cli/ is the commands.
LAYERS = {"sharing": 1, "san": 2, "models": 3, "tools": 4, "data": 5, "export": 5, "timing": 6,
          "distill": 7, "cli": 8}
#: Library packages that never import a command (cli/ is above them).
BELOW_THE_COMMANDS = tuple(name for name in LAYERS if name != "cli")


def imported_modules(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module
            for alias in node.names:  # from fairseq_shared import experiments
                yield node.lineno, f"{node.module}.{alias.name}"


def library_files():
    """The plug-in's modules but its commands (cli/)."""
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] != "cli":
            yield path


def is_main_block(node: ast.AST) -> bool:
    """``if __name__ == "__main__":``, the entry of ``python -m`` (not an import of the module)."""
    test = getattr(node, "test", None)
    return (isinstance(node, ast.If) and isinstance(test, ast.Compare)
            and isinstance(test.left, ast.Name) and test.left.id == "__name__")


def imports_of(paths, package: str, main_blocks: bool = True):
    """``path:line imports module`` for each import of ``package`` (or below) in ``paths``;
    ``main_blocks=False`` leaves out what ``if __name__ == "__main__":`` blocks import."""
    offenders = []
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        if not main_blocks:
            tree.body = [n for n in tree.body if not is_main_block(n)]
        for line, module in imported_modules(tree):
            if module == package or module.startswith(package + "."):
                where = path.relative_to(PACKAGE.parent) if PACKAGE.parent in path.parents else path
                offenders.append(f"{where}:{line} imports {module}")
    return offenders


def test_the_plug_in_never_imports_the_harness():
    offenders = imports_of(sorted(PACKAGE.rglob("*.py")), HARNESS)
    assert not offenders, "\n".join(offenders)


def layer_of(parts) -> tuple:
    """(package, rank) of a module given as the parts of its path or name below
    ``fairseq_shared``: a top-level module is rank 0 and of no package."""
    if parts[0] in LAYERS:
        return parts[0], LAYERS[parts[0]]
    return None, 0


def layer_offenders(package_dir: Path):
    """``path:line imports module`` for each import of a higher layer, or of a sibling package of
    the same rank (data and export)."""
    offenders = []
    for path in sorted(package_dir.rglob("*.py")):
        parts = path.relative_to(package_dir).parts
        if parts == ("__init__.py",):  # the plug-in's entry registers the models: above all
            continue
        own, own_rank = layer_of(parts)
        for line, module in imported_modules(ast.parse(path.read_text(encoding="utf-8"))):
            names = module.split(".")
            if names[0] != "fairseq_shared" or len(names) < 2:
                continue
            other, other_rank = layer_of(names[1:])
            if other != own and (other_rank > own_rank or (other_rank == own_rank and other)):
                offenders.append(f"{path.relative_to(package_dir.parent)}:{line} imports {module}")
    return offenders


def test_every_package_imports_only_lower_layers():
    offenders = layer_offenders(PACKAGE)
    assert not offenders, "\n".join(offenders)


def test_the_layer_check_sees_an_import_upwards_and_between_siblings(tmp_path):
    fake = tmp_path / "fairseq_shared"
    for package in ("export", "data", "timing"):
        (fake / package).mkdir(parents=True)
    (fake / "export" / "verify.py").write_text("from fairseq_shared.timing import select_ids\n")
    (fake / "data" / "x.py").write_text("from fairseq_shared.export import api\n"
                                        "from fairseq_shared.subsets import select_ids\n")
    (fake / "timing" / "y.py").write_text("from fairseq_shared.export import ct2\n")
    assert layer_offenders(fake) == [
        "fairseq_shared/data/x.py:1 imports fairseq_shared.export",
        "fairseq_shared/data/x.py:1 imports fairseq_shared.export.api",
        "fairseq_shared/export/verify.py:1 imports fairseq_shared.timing",
        "fairseq_shared/export/verify.py:1 imports fairseq_shared.timing.select_ids"]


def test_every_package_has_a_layer():
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert packages == set(LAYERS)


def test_only_the_main_block_is_left_out(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("import os\nif __name__ == '__main__':\n"
                    "    from fairseq_shared.cli.bible import main\n")
    assert f"{path}:3 imports fairseq_shared.cli.bible" in imports_of([path], COMMANDS)
    assert imports_of([path], COMMANDS, main_blocks=False) == []


def test_the_library_packages_never_import_the_commands():
    """Not even from a ``__main__`` block: each command has one module path, in cli/."""
    paths = [p for p in sorted(PACKAGE.rglob("*.py"))
             if p.relative_to(PACKAGE).parts[0] in BELOW_THE_COMMANDS]
    offenders = imports_of(paths, COMMANDS)
    assert not offenders, "\n".join(offenders)


def test_no_relative_imports_hide_an_import_of_the_harness():
    relative = [f"{p.relative_to(PACKAGE.parent)}:{n.lineno}" for p in library_files()
                for n in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
                if isinstance(n, ast.ImportFrom) and n.level > 0]
    assert not relative, "the package uses absolute imports only: " + ", ".join(relative)


def test_the_check_sees_an_import_of_the_harness():
    tree = ast.parse("import os\nfrom harness.configs import CONFIGS\n"
                     "from harness import queue\nimport harness_of_another_project\n")
    found = {m for _, m in imported_modules(tree) if m == HARNESS or m.startswith(HARNESS + ".")}
    assert found == {"harness.configs", "harness.configs.CONFIGS", "harness", "harness.queue"}
    assert not any(m.startswith("os") for m in found)


def test_library_files_covers_the_package_but_not_the_harness():
    names = {str(p.relative_to(PACKAGE)) for p in library_files()}
    assert "sharing/assignment.py" in names and "fairseq_commands.py" in names
    assert "tools/checkpoints.py" in names and "cli/count_params.py" not in names
    assert not any(n.startswith("cli/") for n in names)


def test_every_imported_module_of_the_package_exists():
    """After a module moves, no caller (the package, the tests, the scripts) still imports it
    by its old name: each ``fairseq_shared...`` module named in an import can be found."""
    import importlib.util

    root = PACKAGE.parent
    missing = []
    for path in sorted([*PACKAGE.rglob("*.py"), *(root / HARNESS).rglob("*.py"),
                        *(root / "tests").glob("*.py"), *(root / "scripts").glob("*.py")]):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0
                     and node.module else [])
            for name in names:
                if name.split(".")[0] in ("fairseq_shared", HARNESS) and \
                        importlib.util.find_spec(name) is None:
                    missing.append(f"{path.relative_to(root)}:{node.lineno} imports {name}")
    assert not missing, "\n".join(missing)


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_targets(tree: ast.AST, modules):
    """What each import loads: ``from a import b`` is module ``a.b`` where that is a module,
    else a name of ``a``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                yield full if full in modules else node.module


def import_graph(paths, root: Path = PACKAGE.parent) -> dict:
    """module -> the package's modules it imports anywhere in its file (function-level imports
    included: they close a circle as surely as top-level ones, only later)."""
    modules = {module_name(p, root): p for p in paths}
    graph = {}
    for name, path in modules.items():
        edges = set()
        for target in imported_targets(ast.parse(path.read_text(encoding="utf-8")), modules):
            while target and target not in modules:  # ``import a.b.name`` -> a.b
                target = target.rpartition(".")[0]
            if target and target != name:
                edges.add(target)
        graph[name] = edges
    return graph


def circles(graph: dict) -> list:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_package_has_no_import_circles():
    found = circles(import_graph(sorted(PACKAGE.rglob("*.py"))))
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_circle_check_finds_a_function_level_circle(tmp_path):
    package = tmp_path / "fairseq_shared"
    package.mkdir()
    (package / "a.py").write_text("from fairseq_shared.b import f\n")
    (package / "b.py").write_text("def f():\n    from fairseq_shared import a\n")
    (package / "c.py").write_text("import fairseq_shared.a\n")
    assert circles(import_graph(sorted(package.glob("*.py")), tmp_path)) == [
        ["fairseq_shared.a", "fairseq_shared.b"]]
