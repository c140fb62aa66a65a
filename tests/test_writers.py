"""Every writer of the package writes through ``checkpoint_io.atomic_write`` or the same pattern
(issue 57): a fresh temporary name, never a link followed, then a rename. A link planted at the
old fixed temporary names (``PATH.tmp``, ``DIR.tmp``) or at the output itself leaves its target
byte-identical."""

import ast
import os
from pathlib import Path

import pytest

from fairseq_shared.data import pipeline

PACKAGE = Path(__file__).resolve().parent.parent / "fairseq_shared"
#: atomic_write itself; the export writes into a fresh staging directory (export/directory.py)
EXEMPT = ("checkpoint_io.py", "export/")


def _name(func):
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)


def _writes(node):
    """Whether the call ``node`` opens or writes a file other than through atomic_write."""
    func, name = node.func, _name(node.func)
    owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(
        func.value, ast.Name) else None
    if name == "open" and owner is None:
        mode = node.args[1] if len(node.args) > 1 else next(
            (k.value for k in node.keywords if k.arg == "mode"), None)
        return isinstance(mode, ast.Constant) and any(c in str(mode.value) for c in "wax+")
    if name in ("write_text", "write_bytes"):  # pathlib's; ours is called by its bare name
        return isinstance(func, ast.Attribute) and owner not in ("pipeline", "checkpoint_io")
    return (owner == "shutil" and name in ("copy", "copy2", "copyfile", "copytree")) or (
        owner == "json" and name == "dump") or name in ("urlretrieve", "savefig")


def writers_outside_atomic_write(source: str):
    """The writing calls of ``source`` but those inside the callback of an atomic_write."""
    tree = ast.parse(source)
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _name(node.func) == "atomic_write":
            inside.update(id(n) for arg in node.args[1:] if isinstance(arg, ast.Lambda)
                          for n in ast.walk(arg))
    return [n for n in ast.walk(tree)
            if isinstance(n, ast.Call) and id(n) not in inside and _writes(n)]


def test_no_module_of_the_package_writes_a_file_but_through_atomic_write():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith(EXEMPT):
            continue
        for node in writers_outside_atomic_write(path.read_text()):
            found.append(f"{relative}:{node.lineno}: {ast.unparse(node)[:70]}")
    assert not found, "\n".join(found)


def test_the_rule_finds_a_plain_writer():  # the scan above can fail
    calls = ['open(p, "w")', "Path(p).write_text(t)", "json.dump(d, f)", "shutil.copy(a, b)",
             "fig.savefig(p)", 'open(p, mode="ab")', "atomic_write(p, f(open(q, 'w')))"]
    assert all(writers_outside_atomic_write(c) for c in calls)
    assert not any(writers_outside_atomic_write(c) for c in [
        "open(p)", 'open(p, "rb")', "pipeline.write_text(p, t)", "write_text(p, t)",
        "atomic_write(p, lambda f: fig.savefig(f))", "shutil.copyfileobj(a, f)"])


@pytest.fixture
def victim(tmp_path):
    path = tmp_path / "victim"
    path.write_text("the user's own file\n")
    return path


def _planted(victim, *links):
    for link in links:
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(victim)


def test_line_and_text_writers_never_follow_a_planted_link(tmp_path, victim):
    out = tmp_path / "out" / "train.en"
    _planted(victim, out.with_name("train.en.tmp"), out)
    pipeline.write_lines(out, ["a b", "c\nd"])
    assert out.read_text() == "a b\nc d\n" and not out.is_symlink()
    marker_dir = tmp_path / "stages" / ".stages"
    _planted(victim, marker_dir / "step.tmp", marker_dir / "step.done")
    assert pipeline.Stages(tmp_path / "stages").run("step", [out], lambda: None)
    assert '"fingerprint"' in (marker_dir / "step.done").read_text()
    copied = tmp_path / "copy" / "file"
    _planted(victim, copied)
    pipeline.copy_file(out, copied)
    assert copied.read_bytes() == out.read_bytes()
    assert victim.read_text() == "the user's own file\n"
    assert sorted(os.listdir(out.parent)) == ["train.en", "train.en.tmp"]  # no temporary left


def test_sentencepiece_and_preprocess_never_follow_a_planted_link(tmp_path, victim):
    text = tmp_path / "text"
    lines = [f"w{i % 7} w{i % 5} w{i % 3} x{i % 11}" for i in range(60)]
    for lang in ("src", "tgt"):
        pipeline.write_lines(text / f"train.{lang}", lines)
    prefix = tmp_path / "spm"
    _planted(victim, tmp_path / "spm.tmp.model", tmp_path / "spm.tmp.vocab", tmp_path / "spm.model")
    pipeline.train_sentencepiece([text / "train.src"], prefix, 30)
    assert (tmp_path / "spm.model").stat().st_size > 1000
    held = tmp_path / "held"  # a directory of the user's, linked at bin.tmp and at bin
    held.mkdir()
    (held / "notes").write_text("kept\n")
    (tmp_path / "bin.tmp").symlink_to(held)
    (tmp_path / "bin").symlink_to(held)
    pipeline.fairseq_preprocess("src", "tgt", text / "train", tmp_path / "bin")
    assert sorted(os.listdir(held)) == ["notes"] and (held / "notes").read_text() == "kept\n"
    bin_dir = tmp_path / "bin"
    assert not bin_dir.is_symlink() and (bin_dir / "dict.src.txt").exists()
    umask = os.umask(0)
    os.umask(umask)
    assert bin_dir.stat().st_mode & 0o777 == 0o777 & ~umask  # not mkdtemp's 0700
    assert victim.read_text() == "the user's own file\n"
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]  # nothing left beside
