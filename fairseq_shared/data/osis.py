"""Turn one verse of raw OSIS (as stored in a SWORD module) into plain text.

Rules (see tests/test_bible.py for real verses):

* ``<note>...</note>`` (footnotes, cross references, variant readings) go with their content;
  so do ``<speaker>`` labels (Song of Songs), non-canonical ``<title>`` headings and anything after
  a glossary/book-end division (the WEB's last verse carries the whole glossary).
* Canonical titles (``<title canonical="true">``, the Psalm superscriptions) are kept as text.
* Every other element boundary becomes a space, so words on either side of a removed element
  never get glued ("God</w><note>..</note><w>created" -> "God created"); the exception is
  ``<transChange>`` (the RV1909's words "added" by the translators), which sits inside words
  ("preguntándo<transChange>le</transChange>") and so is removed without a space; an
  enclitic pronoun in ``<transChange>`` right after a closing ``</w>`` is glued to its verb
  ("sáca</w><transChange>lo</transChange>" -> "sácalo").
* Tags next to an em dash add no space ("sky</w>—<w>for" -> "sky—for").
* Strong's numbers written as text (``<H3027>``, ``<G2316>``) are markup and are removed.
* Whitespace is normalised: newlines of poetry become single spaces, no space before closing
  punctuation (``, . ; : ! ? ) ] ” ’ »``), none after opening punctuation (``( [ ¿ ¡ “ ‘ «``).
"""

import html
import re

_DROP_WITH_CONTENT = re.compile(
    r"<(note|speaker|rdg|catchWord)\b[^>]*?(?<!/)>.*?</\1\s*>", re.S
)
_TITLE = re.compile(r"<title\b([^>]*?)(?<!/)>(.*?)</title\s*>", re.S)
# Everything from a glossary division (or the end-of-book marker that precedes it) on.
_TRAILER = re.compile(r'<div\b[^>]*type="(?:glossary|introduction)"[^>]*>.*', re.S)
_INLINE = re.compile(r"</?transChange\b[^>]*>")
# An enclitic pronoun the RV1909 marks as added right after the verb's closing </w>
# ("sáca</w><transChange>lo</transChange>" -> "sácalo"); other added words stay words.
_ENCLITIC = re.compile(
    r"</w>(<transChange\b[^>]*>)((?:me|te|se|nos|os|lo|la|los|las|le|les)+</transChange>)",
    re.I)
# Tags right next to an em dash are not word boundaries: "sky</w>—<w>for" -> "sky—for".
_DASH_TAGS = re.compile(r"(?:<[^>]*>)+(?=—)|(?<=—)(?:<[^>]*>)+")
_STRONGS = re.compile(r"<[HG]\d+[a-z]?>")
_TAG = re.compile(r"<[^>]*>")
_SPACE = re.compile(r"\s+")
_BEFORE_CLOSE = re.compile(r" +(?=[,.;:!?)\]”’»])")
_AFTER_OPEN = re.compile(r"(?<=[(\[¿¡“‘«]) +")


def _title(match):
    attrs, content = match.group(1), match.group(2)
    return " " + content + " " if 'canonical="true"' in attrs else " "


def osis_to_text(raw):
    """Plain text of one verse of raw OSIS markup ('' for an empty verse)."""
    if not raw:
        return ""
    text = _STRONGS.sub(" ", raw)
    text = _TRAILER.sub(" ", text)
    text = _DROP_WITH_CONTENT.sub(" ", text)
    text = _TITLE.sub(_title, text)
    text = _ENCLITIC.sub(r"\1\2", text)
    text = _DASH_TAGS.sub("", text)
    text = _INLINE.sub("", text)
    text = _TAG.sub(" ", text)
    text = html.unescape(text)
    return normalize_space(text)


def normalize_space(text):
    text = _SPACE.sub(" ", text).strip()
    text = _BEFORE_CLOSE.sub("", text)
    text = _AFTER_OPEN.sub("", text)
    return text


_CAPS_RUN = re.compile(r"\b([A-ZÁÉÍÓÚÑÜ]{2,})((?:\s+[A-ZÁÉÍÓÚÑÜ]{2,})*)\b(?!\.)")
_WORD = re.compile(r"\w+")


def casing_lexicon(texts):
    """{lowercased word: its usual written form} from words that do not start a sentence, so
    that "JEHOVÁ" recases to "Jehová" and "LA" to "la"."""
    import collections

    counts = collections.defaultdict(collections.Counter)
    for text in texts:
        for m in _WORD.finditer(text):
            before = text[: m.start()].rstrip()
            word = m.group()
            if not before or before[-1] in ".!?¿¡:;«“\"" or word.isupper():
                continue
            counts[word.lower()][word] += 1
    return {w: c.most_common(1)[0][0] for w, c in counts.items()}


def recase_chapter_opening(text, lexicon=None):
    """RV1909 prints the first word(s) of a chapter in capitals ("EN el principio", "DE DOCE
    años", "Y LA víspera"): give the first run of all-capital words ordinary case. The run's
    first word is capitalised when it starts the sentence; every other word takes its usual
    form from ``lexicon`` (:func:`casing_lexicon`; lower case when absent), so a name stays
    capitalised ("Y JEHOVÁ" -> "Y Jehová"). A capital run followed by a period (the acrostic letters of Psalm
    119, "ALEPH.") is left."""
    lexicon = lexicon or {}
    match = _CAPS_RUN.search(text)
    if not match:
        return text
    words = (match.group(1) + match.group(2)).split()
    before = text[: match.start()]
    starts_sentence = not before.strip() or before.rstrip()[-1] in ".!?¿¡:"
    fixed = []
    for i, word in enumerate(words):
        usual = lexicon.get(word.lower(), word.lower())
        if i == 0 and starts_sentence:
            usual = usual[0].upper() + usual[1:]
        fixed.append(usual)
    return before + " ".join(fixed) + text[match.end():]
