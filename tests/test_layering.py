"""The lines between library, user commands and harness (read from the source with ``ast``;
nothing is imported): nothing outside ``experiments/`` and ``cli/`` imports
``fairseq_shared.experiments``; in ``cli/`` only the named aliases of harness drivers do; and
the library's packages never import the commands of ``cli/``."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "fairseq_shared"
HARNESS = "fairseq_shared.experiments"
COMMANDS = "fairseq_shared.cli"
ABOVE_THE_LIBRARY = ("experiments", "cli")
#: The modules of cli/ that are ``python -m`` aliases of harness drivers (experiments/drivers/),
#: kept because README.md, results/ and the Makefile quote them.
HARNESS_ALIASES = ("budget", "frontier", "main_job")
#: Library packages that never import a command (cli/ is above them).
BELOW_THE_COMMANDS = ("sharing", "san", "tools", "models", "export", "timing", "data")


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
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] not in ABOVE_THE_LIBRARY:
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


def test_the_library_never_imports_the_harness():
    offenders = imports_of(library_files(), HARNESS)
    assert not offenders, "\n".join(offenders)


def test_user_commands_never_import_the_harness_but_the_named_aliases():
    commands = sorted(PACKAGE.glob("cli/*.py"))
    aliases = [p for p in commands if p.stem in HARNESS_ALIASES]
    assert len(aliases) == len(HARNESS_ALIASES), "an alias of HARNESS_ALIASES is gone"
    offenders = imports_of([p for p in commands if p.stem not in HARNESS_ALIASES], HARNESS)
    assert not offenders, "\n".join(offenders)
    for alias in aliases:  # an alias is the import of its driver's main and the __main__ call
        code = [n for n in ast.parse(alias.read_text(encoding="utf-8")).body
                if not isinstance(n, ast.Expr)]
        assert len(code) == 2 and isinstance(code[0], ast.ImportFrom), alias
        assert code[0].module == f"{HARNESS}.drivers.{alias.stem}", alias


def test_the_library_packages_never_import_the_commands():
    """Not even from a ``__main__`` block: each command has one module path, in cli/."""
    paths = [p for p in sorted(PACKAGE.rglob("*.py"))
             if p.relative_to(PACKAGE).parts[0] in BELOW_THE_COMMANDS]
    offenders = imports_of(paths, COMMANDS)
    assert not offenders, "\n".join(offenders)


def test_only_the_main_block_is_left_out(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("import os\nif __name__ == '__main__':\n"
                    "    from fairseq_shared.cli.bible import main\n")
    assert f"{path}:3 imports fairseq_shared.cli.bible" in imports_of([path], COMMANDS)
    assert imports_of([path], COMMANDS, main_blocks=False) == []


def test_no_relative_imports_hide_an_import_of_the_harness():
    relative = [f"{p.relative_to(PACKAGE.parent)}:{n.lineno}" for p in library_files()
                for n in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
                if isinstance(n, ast.ImportFrom) and n.level > 0]
    assert not relative, "the package uses absolute imports only: " + ", ".join(relative)


def test_the_check_sees_an_import_of_the_harness():
    tree = ast.parse("import os\nfrom fairseq_shared.experiments.configs import CONFIGS\n"
                     "from fairseq_shared import experiments\n")
    found = {m for _, m in imported_modules(tree) if m.startswith(HARNESS)}
    assert {"fairseq_shared.experiments.configs", "fairseq_shared.experiments"} <= found
    assert not any(m.startswith("os") for m in found)


def test_library_files_covers_the_package_but_not_the_harness():
    names = {str(p.relative_to(PACKAGE)) for p in library_files()}
    assert "sharing/assignment.py" in names and "fairseq_commands.py" in names
    assert "tools/checkpoints.py" in names and "cli/count_params.py" not in names
    assert not any(n.startswith(("experiments/", "cli/")) for n in names)


def test_every_imported_module_of_the_package_exists():
    """After a module moves, no caller (the package, the tests, the scripts) still imports it
    by its old name: each ``fairseq_shared...`` module named in an import can be found."""
    import importlib.util

    root = PACKAGE.parent
    missing = []
    for path in sorted([*PACKAGE.rglob("*.py"), *(root / "tests").glob("*.py"),
                        *(root / "scripts").glob("*.py")]):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0
                     and node.module else [])
            for name in names:
                if name.split(".")[0] == "fairseq_shared" and \
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
