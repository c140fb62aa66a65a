"""No dead definitions: every module-level function, class and constant of the plug-in and of the
harness is named
somewhere besides its definition (code, tests, scripts or docs), and no ``__all__`` exports a
private name. Read from the source with ``ast`` and a word search; nothing is imported."""

import ast
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "fairseq_shared"
SEARCHED = ("fairseq_shared", "harness", "tests", "scripts", "docs", "recipes")
CHECKED = (PACKAGE, ROOT / "harness")
ENTRY_POINTS = {"main"}  # called by python -m and the console scripts


def corpus():
    files = [p for d in SEARCHED for p in (ROOT / d).rglob("*")
             if p.suffix in (".py", ".md", ".sh") and p.is_file()]
    files += [ROOT / "README.md", ROOT / "pyproject.toml", ROOT / "Makefile"]
    return {p: p.read_text(encoding="utf-8") for p in files}


def definitions(tree):
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.lineno, node.name
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    yield node.lineno, target.id


def test_every_definition_is_used_somewhere():
    texts = corpus()
    # one pass over the corpus: an identifier's \b-delimited occurrences are its \w+ tokens
    words = Counter(w for t in texts.values() for w in re.findall(r"\w+", t))
    unused = []
    for path in sorted(p for d in CHECKED for p in d.rglob("*.py")):
        for line, name in definitions(ast.parse(texts[path])):
            if name in ENTRY_POINTS or (name.startswith("__") and name.endswith("__")):
                continue
            if words[name] - 1 <= 0:  # the definition itself is one
                unused.append(f"{path.relative_to(ROOT)}:{line} {name}")
    assert not unused, "defined but never used:\n" + "\n".join(unused)


def test_no_all_exports_a_private_name():
    private = []
    for path in sorted(p for d in CHECKED for p in d.rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
                private += [f"{path.relative_to(ROOT)}: {e.value}" for e in node.value.elts
                            if isinstance(e, ast.Constant) and e.value.startswith("_")]
    assert not private, "\n".join(private)


def test_definitions_reads_the_module_level_names():
    tree = ast.parse("def used():\n    pass\n\ndef orphan():\n    pass\n\nX = used()\n")
    names = [n for _, n in definitions(tree)]
    assert names == ["used", "orphan", "X"]
