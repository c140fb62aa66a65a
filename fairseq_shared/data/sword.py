"""Reading and cleaning the two SWORD modules of the Bible corpus: Reina-Valera 1909
(``spaRV1909eb``, Debian package sword-text-sparv) and the World English Bible
(``engWEB2015eb``, sword-text-web), verse by verse, with pysword.

Markup removal is :mod:`fairseq_shared.data.osis`; this module adds what needs the whole
module: RV1909's capitalised chapter openings recased from a lexicon of the rest of its text,
and its epistle colophons dropped.
"""

import os
import re
from pathlib import Path

from fairseq_shared.data.osis import casing_lexicon, osis_to_text, recase_chapter_opening

SWORD_PATH = os.environ.get("SWORD_PATH", "/usr/share/sword")
SRC_MODULE, TGT_MODULE = "spaRV1909eb", "engWEB2015eb"
SRC, TGT = "es", "en"
DEBIAN_PACKAGES = {SRC_MODULE: "sword-text-sparv", TGT_MODULE: "sword-text-web"}
INSTALL_HINT = "apt-get install sword-text-sparv sword-text-web"


class MissingModulesError(RuntimeError):
    pass


def check_modules(sword_path=SWORD_PATH, modules=(SRC_MODULE, TGT_MODULE)):
    """Raise MissingModulesError naming the Debian packages when a module is not installed."""
    root = Path(sword_path)
    missing = []
    for name in modules:
        conf = root / "mods.d" / f"{name.lower()}.conf"
        conf_any = [p for p in (root / "mods.d").glob("*.conf")] if (root / "mods.d").is_dir() else []
        has_conf = conf.exists() or any(p.stem.lower() == name.lower() for p in conf_any)
        has_data = (root / "modules" / "texts" / "ztext" / name).is_dir()
        if not (has_conf and has_data):
            missing.append(name)
    if missing:
        pkgs = " ".join(DEBIAN_PACKAGES[m] for m in missing if m in DEBIAN_PACKAGES)
        raise MissingModulesError(
            f"SWORD module(s) {', '.join(missing)} not found under {root}. They come from the "
            f"Debian packages {pkgs or 'sword-text-sparv sword-text-web'}; install them with:\n"
            f"    {INSTALL_HINT}\n"
            f"(as root, after apt-get update; or run scripts/install_system_packages.sh). "
            f"Nothing was installed."
        )


# --------------------------------------------------------------------------- reading

def _open_module(name, sword_path):
    from pysword.modules import SwordModules

    modules = SwordModules(sword_path)
    modules.parse_modules()  # pysword would choke on 'Globals' if asked for it; we never do
    bible = modules.get_bible_from_module(name)
    # pysword decompresses the whole (book-sized) block for every verse; remember the last one.
    original = bible._decompressed_text
    cache = {}

    def cached(testament, buf_num):
        key = (testament, buf_num)
        if key not in cache:
            cache.clear()
            cache[key] = original(testament, buf_num)
        return cache[key]

    bible._decompressed_text = cached
    return bible


def book_order(sword_path=SWORD_PATH, module=SRC_MODULE):
    """OSIS names of the books of ``module`` in canonical order."""
    bible = _open_module(module, sword_path)
    return [b.osis_name for books in bible.get_structure().get_books().values() for b in books]


def read_module(name, books=None, sword_path=SWORD_PATH):
    """{(book, chapter, verse): raw OSIS} for every verse slot of the module's versification."""
    bible = _open_module(name, sword_path)
    structure = bible.get_structure()
    wanted = None if books is None else {b.lower() for b in books}
    verses = {}
    for testament, book_list in structure.get_books().items():
        for book in book_list:
            if wanted is not None and book.osis_name.lower() not in wanted:
                continue
            offset = structure._book_offset(book.name)
            for chapter in range(1, book.num_chapters + 1):
                for verse in range(1, book.chapter_lengths[chapter - 1] + 1):
                    idx = book.get_indicies(chapters=[chapter], verses=[verse], offset=offset)[0]
                    verses[(book.osis_name, chapter, verse)] = bible._text_for_index(testament, idx)
    return verses


# RV1909 ends these epistles' last verse with a colophon ("Fué escrita á los Hebreos desde
# Italia ...") after the closing "Amén."; the WEB has no counterpart.
COLOPHON_BOOKS = ("Rom", "1Cor", "Gal", "Eph", "Phil", "Col", "1Thess", "2Thess", "1Tim",
                  "2Tim", "Titus", "Phlm", "Heb")
_COLOPHON = re.compile(r"(Amén\.).+$")


def strip_colophon(text):
    return _COLOPHON.sub(r"\1", text)


def clean_module(raw_verses, recase=False):
    """Plain text of every verse; ``recase``: the RV1909's capitalised chapter openings and
    its epistle colophons."""
    clean = {key: osis_to_text(raw) for key, raw in raw_verses.items()}
    if recase:
        lexicon = casing_lexicon(text for key, text in clean.items() if key[2] != 1)
        last_verse = {}
        for key in clean:
            if clean[key]:
                last_verse[key[0]] = max(last_verse.get(key[0], key), key)
        for key, text in clean.items():
            if key[2] == 1:
                text = recase_chapter_opening(text, lexicon)
            if key[0] in COLOPHON_BOOKS and key == last_verse[key[0]]:
                text = strip_colophon(text)
            clean[key] = text
    return clean
