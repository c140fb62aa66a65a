"""The README and docs/ cannot drift from the code: every link, module path and ``python -m``
command they name exists, and the README's package map lists the whole package (read from
the files; nothing is imported)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "fairseq_shared"
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
RESULTS = ROOT / "results"
RESULT_PAGES = sorted(RESULTS.glob("**/README.md"))  # the index, each folder's, the archive's
BUDGET = RESULTS / "bible_budget"
#: Where the README's headline numbers are written: the rendered files of the current answer.
HEADLINE_HOMES = [BUDGET / "summary.md", BUDGET / "tables.md", BUDGET / "frontier" / "frontier.md",
                  *sorted(BUDGET.glob("frontier_later/*/frontier.md"))]
#: The commit whose tree last held the model binaries of results/ (results/README.md, "Model
#: binaries", says how to restore them); main tracks none since.
MODELS_COMMIT = "228a8ec"
DECIMAL = re.compile(r"(?<![\d.])[-+]?\d+\.\d+")
MAP_MARK = "<!-- package map:"


def text(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def module_file(dotted: str):
    """``fairseq_shared.a.b`` -> its file (module or package), or None."""
    path = ROOT.joinpath(*dotted.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def names_something(dotted: str) -> bool:
    """A module, or one name defined at the top of a module (``...hf_generation.FairseqLengthLimit``)."""
    if module_file(dotted):
        return True
    module, _, name = dotted.rpartition(".")
    source = module_file(module)
    return source is not None and re.search(
        rf"^(?:def|class) {name}\b|^{name}\s*[:=]|import .*\b{name}\b", source.read_text(encoding="utf-8"),
        re.M) is not None


def package_map():
    """The README's map: its first-column entries, read from the table after the marker."""
    after = text(ROOT / "README.md").split(MAP_MARK, 1)[1]
    rows = [l for l in after.splitlines()[1:] if l.startswith("|")][2:]  # header, rule
    entries = []
    for row in rows:
        first = row.split("|")[1]
        entries += re.findall(r"`([^`]+)`", first)
    return entries


def test_every_relative_link_resolves():
    broken = []
    for page in PAGES + RESULT_PAGES:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text(page)):
            if not target.startswith(("http://", "https://", "mailto:")) \
                    and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, "\n".join(broken)


#: A quote of a command that is gone is historical when the text just before it says at which
#: commit it ran ("ran at commit a109b73 as:"); the module must exist at that commit.
HISTORICAL = re.compile(r"at commit ([0-9a-f]{7,40})\b[^`]{0,200}?`{0,3}(?:bash)?\s*"
                        r"(?:[A-Z_]+=\S+ )*(?:\S*/)?python -m $", re.S)


def file_at(commit: str, path: str) -> bool:
    """Whether ``path`` existed at ``commit`` (True without git history)."""
    import subprocess

    if not (ROOT / ".git").exists():
        return True
    return subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}:{path}"],
                          capture_output=True).returncode == 0


def existed_at(commit: str, dotted: str) -> bool:
    """Whether ``fairseq_shared.a.b`` was a module at ``commit`` (True without git history)."""
    base = "/".join(dotted.split("."))
    return any(file_at(commit, path) for path in (f"{base}.py", f"{base}/__init__.py"))


#: an archived page whose every command runs at one commit says so once, at its top
PAGE_AT = re.compile(r"Every command on this page runs at commit ([0-9a-f]{7,40})\b")


def python_m_quotes(body: str):
    """``(module, commit)`` of every ``python -m fairseq_shared...`` (or ``harness...``) quote;
    commit is the one
    a historical quote (or its page, :data:`PAGE_AT`) names, else None."""
    page = PAGE_AT.search(body)
    for m in re.finditer(r"python -m ((?:fairseq_shared|harness)(?:\.[a-z_]\w*)+)", body):
        before = HISTORICAL.search(body[max(0, m.start() - 260):m.start() + len("python -m ")])
        yield m.group(1), (before or page).group(1) if (before or page) else None


def test_every_python_m_command_names_a_module_that_exists():
    missing = sorted({f"{page.relative_to(ROOT)}: {m}" + (f" (at commit {at})" if at else "")
                      for page in PAGES + RESULT_PAGES for m, at in python_m_quotes(text(page))
                      if (module_file(m) is None if at is None else not existed_at(at, m))})
    assert not missing, "\n".join(missing)


def test_a_historical_quote_names_its_commit():
    body = ("It ran at commit a109b73 as:\n\n```bash\nOMP_NUM_THREADS=2 .venv/bin/python -m "
            "fairseq_shared.cli.reproduce --data x\n```\nthen `python -m fairseq_shared.cli.gone`.")
    assert list(python_m_quotes(body)) == [("fairseq_shared.cli.reproduce", "a109b73"),
                                           ("fairseq_shared.cli.gone", None)]
    if (ROOT / ".git").exists():
        assert existed_at("a109b73", "fairseq_shared.cli.reproduce")
        assert not existed_at("a109b73", "fairseq_shared.cli.no_such_command")


#: A quote of a script that is gone is historical when the text just before it names the commit
#: it ran at ("ran at commit d105a80 as `python scripts/x.py`"); the file must exist there.
SCRIPT_AT = re.compile(r"at commit ([0-9a-f]{7,40})\b[^`]{0,120}?`?(?:python\s+)?$", re.S)


def script_quotes(body: str):
    """``(path, commit)`` of every ``scripts/x.py`` or ``results/.../x.sh`` a page quotes."""
    for m in re.finditer(r"(?<![\w/.])((?:scripts|results)/[\w/.-]+\.(?:py|sh))\b", body):
        before = SCRIPT_AT.search(body[max(0, m.start() - 160):m.start()])
        yield m.group(1), before.group(1) if before else None


def test_every_script_quoted_in_the_results_readmes_exists():
    """``scripts/x.py`` and the archived ``results/archive/<topic>/x.py`` a README quotes."""
    missing = sorted({f"{page.relative_to(ROOT)}: {path}" + (f" (at commit {at})" if at else "")
                      for page in RESULT_PAGES for path, at in script_quotes(text(page))
                      if not ((ROOT / path).exists() if at is None else file_at(at, path))})
    assert not missing, "\n".join(missing)


def test_a_historical_script_quote_names_its_commit():
    body = "it ran at commit d105a80 as `python scripts/thread_rate.py`; now `scripts/gone.py`."
    assert list(script_quotes(body)) == [("scripts/thread_rate.py", "d105a80"),
                                         ("scripts/gone.py", None)]
    if (ROOT / ".git").exists():
        assert file_at("d105a80", "scripts/thread_rate.py")
        assert not file_at("d105a80", "scripts/no_such_script.py")


def test_every_module_path_named_exists():
    """Backticked paths (``fairseq_shared/...``, or relative to the package or the checkout) and
    dotted ``fairseq_shared.x`` names (see :func:`names_something`)."""
    missing = []
    for page in PAGES:
        body = text(page)
        for path in re.findall(r"`(fairseq_shared/[\w/]+(?:\.py)?)`", body):
            if not (ROOT / path).exists():
                missing.append(f"{page.relative_to(ROOT)}: {path}")
        for path in re.findall(r"`((?:\w+/)+\w+\.py)`", body):  # models/config.py, scripts/x.py
            if path.startswith("fairseq/"):  # fairseq's own files (or a fork's)
                continue
            if not ((ROOT / path).exists() or (PACKAGE / path).exists()):
                missing.append(f"{page.relative_to(ROOT)}: {path}")
        for dotted in re.findall(r"`(fairseq_shared(?:\.\w+)+)", body):
            if not names_something(dotted):
                missing.append(f"{page.relative_to(ROOT)}: {dotted}")
    assert not missing, "\n".join(missing)


def test_the_package_map_lists_every_part_of_the_package_and_nothing_else():
    listed = set(package_map())
    parts = {p.name + ("/" if p.is_dir() else "") for p in PACKAGE.iterdir()
             if (p.is_dir() and (p / "__init__.py").exists())
             or (p.suffix == ".py" and p.name != "__init__.py")}
    assert listed - parts == set(), f"the map names what is not there: {sorted(listed - parts)}"
    assert parts - listed == set(), f"the map leaves out: {sorted(parts - listed)}"


#: the README's results table, written by ``python -m harness.readme_table`` between these
#: (``harness/readme_table.py`` holds the same two lines)
TABLE_BEGIN = "<!-- results table: rendered by `python -m harness.readme_table`"
TABLE_END = "<!-- end of the results table -->"


def readme_section(title: str) -> str:
    return text(ROOT / "README.md").split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_readme_is_a_front_page():
    """What the plug-in is, the two commands, train / decode / timing / export, then which to
    pick (at most five bullets) before the results table, which has at most seven columns."""
    lines = text(ROOT / "README.md").splitlines()
    # 190: the 180 of issue 54's front page and the fixed-size answers issue 55 puts under the table
    assert len(lines) <= 190, f"README.md has {len(lines)} lines; move detail to docs/"
    headings = [l for l in lines if l.startswith("## ")]
    for needed in ("## Install", "## Quick start: translation", "## Which to pick",
                   "## What was measured", "## Quick start: language model",
                   "## Architectures", "## Flags", "## Where things live"):
        assert needed in headings, needed
    order = [headings.index(h) for h in ("## Install", "## Quick start: translation",
                                         "## Which to pick", "## What was measured")]
    assert order == sorted(order), "install, quick start, which to pick, then the results"
    first = "\n".join(lines[:lines.index("## Which to pick")])
    for command in ("make demo", "make test", "fairseq-train", "fairseq-generate",
                    "fairseq-shared-time-generate", "fairseq-shared-export"):
        assert command in first, f"the first screen shows {command}"
    bullets = [l for l in readme_section("Which to pick").splitlines() if l.startswith("- ")]
    assert 1 <= len(bullets) <= 5, f"'Which to pick' has {len(bullets)} bullets (at most 5)"
    table = readme_table()
    assert table and all(len(row.strip("|").split(" | ")) <= 7 for row in table), \
        "the README's results table has at most 7 columns; the full one is summary.md"


def readme_table():
    """The rows of the README's rendered results table (between its markers)."""
    body = text(ROOT / "README.md")
    assert TABLE_BEGIN in body and TABLE_END in body, "README.md: the results table's markers"
    block = body.split(TABLE_BEGIN, 1)[1].split("\n", 1)[1].split(TABLE_END, 1)[0]
    return [line for line in block.splitlines() if line.startswith("|")]


def test_the_install_page_lists_every_console_script():
    """docs/install.md names each of ``pyproject.toml``'s console scripts (``-distill`` for
    ``fairseq-shared-distill``) and no other."""
    scripts = re.findall(r"^fairseq-shared-([\w-]+) =", text(ROOT / "pyproject.toml"), re.M)
    page = text(ROOT / "docs" / "install.md").split("The console scripts are", 1)[1].split("(", 1)[0]
    named = re.findall(r"`(?:fairseq-shared)?-([\w-]+)`", page)
    assert scripts and sorted(named) == sorted(scripts), (sorted(named), sorted(scripts))


def test_the_pins_comments_name_where_the_pins_are_explained():
    section = "Why these pins"
    assert f"## {section}" in text(ROOT / "docs" / "install.md")
    for name in ("pyproject.toml", "requirements.txt"):
        assert f'docs/install.md, "{section}"' in text(ROOT / name), name


def test_every_docs_page_is_reachable_from_the_readme():
    linked = set(re.findall(r"\]\(docs/([\w.-]+\.md)", text(ROOT / "README.md")))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert pages - linked == set(), f"docs pages the README never links: {sorted(pages - linked)}"


def test_each_number_of_the_readme_table_is_in_its_rows_summary_row():
    """Each row of the README's table (rendered from the records by ``python -m
    harness.readme_table``; ``tests/test_readme_table.py`` renders it again) states numbers of
    the same model's row of ``summary.md``, the full table rendered from the same records."""
    summary = {}
    for line in text(BUDGET / "summary.md").splitlines():
        if line.startswith("| "):
            summary[line.split(" | ")[0]] = {m for m in DECIMAL.findall(line)}
    missing = []
    for row in readme_table()[2:]:
        key = row.split(" | ")[0]
        assert key in summary, f"README table row {key!r} is not a row of summary.md"
        missing += [f"{key}: {n}" for n in DECIMAL.findall(row) if n not in summary[key]
                    and n.lstrip("+-") not in {x.lstrip("+-") for x in summary[key]}]
    assert not missing, "\n".join(missing)


def decimals(body: str):
    """``[(as written, value, decimal places)]`` of every decimal number in ``body``."""
    return [(m, float(m), len(m.split(".")[1])) for m in DECIMAL.findall(body)]


def test_the_readmes_headline_numbers_are_their_homes():
    """Every decimal number of the README's findings ("Which to pick" and the prose of "What
    was measured", around its rendered table) is a number of the rendered files, at the
    README's precision and with its sign: rounded, never computed by hand (a difference or
    ratio the render does not print has no home)."""
    sections = readme_section("Which to pick") + readme_section("What was measured")
    prose = "\n".join(line for line in sections.splitlines() if not line.startswith("|"))
    home = [value for page in HEADLINE_HOMES for _, value, _ in decimals(text(page))]
    orphans = [written for written, value, places in decimals(prose)
               if not any(abs(h - value) <= 0.5 * 10 ** -places + 1e-9 and (h < 0) == (value < 0)
                          for h in home)]
    assert decimals(prose) and not orphans, \
        f"README numbers found in none of {[str(p.relative_to(ROOT)) for p in HEADLINE_HOMES]}: {orphans}"


def test_the_results_index_quotes_the_current_answer():
    """results/README.md leads with lines of ``summary.md`` (quoted, ``> ``), word for word."""
    quoted = [line[2:] for line in text(RESULTS / "README.md").splitlines() if line.startswith("> ")]
    rendered = text(BUDGET / "summary.md").splitlines()
    assert quoted and all(line in rendered for line in quoted), \
        "quote the current answer from results/bible_budget/summary.md as it is rendered"


def test_the_results_index_has_a_row_per_entry_and_the_archive_a_reason_per_item():
    entries = sorted(p.name for p in RESULTS.iterdir())
    assert len(entries) <= 12, f"results/ has {len(entries)} top-level entries (at most 12)"
    index = text(RESULTS / "README.md")
    rows = set(re.findall(r"^\| \[([^\]]+?)/?\]\(", index, re.M))  # [folder/](...) or [file.md](...)
    assert rows == set(entries) - {"README.md"}, \
        f"results/README.md: one row per entry; rows {sorted(rows)}, entries {entries}"
    archive = text(RESULTS / "archive" / "README.md")
    reasons = set(re.findall(r"^\| \[([^\]]+?)/\]\(", archive, re.M))
    assert reasons == {p.name for p in (RESULTS / "archive").iterdir() if p.is_dir()}


def test_no_model_binary_is_added_to_results():
    import subprocess

    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files", "*.pt"], capture_output=True,
                             text=True, check=True).stdout.split()
    assert tracked == ["tests/fixtures/regression.pt"], \
        "new models stay in the work directory (results/README.md, \"Model binaries\")"
    assert f"git checkout {MODELS_COMMIT} --" in text(RESULTS / "README.md")


def test_the_tracked_tree_fits_a_gpu_machines_64_mib_with_room():
    """Tracked files at most 48 MB (issue 54): a GPU machine lent for a check takes 64 MiB."""
    import subprocess

    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True,
                           text=True, check=True).stdout.split("\0")
    size = sum((ROOT / f).stat().st_size for f in files if f and (ROOT / f).is_file())
    assert size <= 48e6, f"tracked files: {size / 1e6:.1f} MB, over 48 MB"


def test_an_archived_page_names_its_commit_once_for_every_quote():
    body = ("Every command on this page runs at commit af87f30 (`git worktree add ...`).\n\n"
            "```bash\npython -m fairseq_shared.cli.relaxed plan\n```\n" + "x\n" * 300 +
            "`python -m fairseq_shared.cli.relaxed render`")
    assert list(python_m_quotes(body)) == [("fairseq_shared.cli.relaxed", "af87f30")] * 2
    assert list(python_m_quotes("`python -m harness.budget`")) == [
        ("harness.budget", None)]
