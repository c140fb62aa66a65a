"""The line between library and harness: nothing outside ``experiments/`` and ``cli/`` imports
``fairseq_shared.experiments`` (read from the source with ``ast``; nothing is imported)."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "fairseq_shared"
HARNESS = "fairseq_shared.experiments"
ABOVE_THE_LIBRARY = ("experiments", "cli")


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


def test_the_library_never_imports_the_harness():
    offenders = []
    for path in library_files():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, module in imported_modules(tree):
            if module == HARNESS or module.startswith(HARNESS + "."):
                offenders.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}")
    assert not offenders, "\n".join(offenders)


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
    assert "sharing.py" in names and "fairseq_commands.py" in names
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
