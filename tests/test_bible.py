"""The offline Spanish-English Bible corpus: OSIS cleaning, pairing, splitting, the restartable
build (on a few real books), the missing-module message, and the scoring helpers."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fairseq_shared import scoring
from fairseq_shared.data import bible, pipeline
from fairseq_shared.data.align import align_11
from fairseq_shared.data.osis import casing_lexicon, osis_to_text, recase_chapter_opening

ROOT = Path(__file__).resolve().parents[1]
HAVE_MODULES = all(
    (Path(bible.SWORD_PATH) / "modules/texts/ztext" / m).is_dir()
    for m in (bible.SRC_MODULE, bible.TGT_MODULE))
needs_modules = pytest.mark.skipif(
    not HAVE_MODULES,
    reason=f"SWORD modules missing under {bible.SWORD_PATH}: run `{bible.INSTALL_HINT}` "
           "(scripts/install_system_packages.sh)")
ENV = pipeline.subprocess_env()


# --------------------------------------------------------------------------- cleaning

def test_note_between_words_becomes_space():
    raw = ('<w lemma="strong:H0430">God</w><note placement="foot"><reference type="annotateRef">'
           '1:1 </reference>The Hebrew word rendered “God” is “אֱלֹהִ֑ים”.</note>'
           '<w lemma="strong:H1254">created</w> <w>the</w> earth. <div eID="gen25" type="x-p"/>')
    assert osis_to_text(raw) == "God created the earth."


def test_strongs_titles_poetry_inline_and_punctuation():
    raw = ('<title canonical="true" type="psalm">A Psalm by David.</title> <lg sID="a"/>'
           '<l level="1" sID="b"/>Yahweh, how <w>my</w> foes <w>have</w> increased!<l eID="b"/>\n'
           '<l level="2" sID="c"/>“<w>There</w> is no help<H3027>.”<l eID="c"/>')
    assert osis_to_text(raw) == "A Psalm by David. Yahweh, how my foes have increased! “There is no help.”"
    # a heading that is not canonical, and a speaker label, go with their content
    assert osis_to_text('<title type="x-section">Heading</title><speaker>Beloved</speaker>'
                        '<w>Let</w> him') == "Let him"
    # RV1909's added words: inside a word no space, between words the <w> boundary gives one
    assert osis_to_text('preguntándo<transChange type="added">le</transChange>, y') == "preguntándole, y"
    assert osis_to_text('<w>hay allí</w><transChange type="added">también</transChange><w>bdelio</w>') \
        == "hay allí también bdelio"
    assert osis_to_text('¡<w>OH</w> <w>Jehová</w>! (<w>Selah</w>.)') == "¡OH Jehová! (Selah.)"
    assert osis_to_text("") == "" and osis_to_text('<chapter eID="Num.12"/><div eID="x"/>') == ""
    assert osis_to_text("a &amp; b") == "a & b"


def test_recase_chapter_opening():
    lexicon = {"jehová": "Jehová", "la": "la"}
    # a one-letter word before the capital run: the run is mid-sentence (Matt 28:1)
    assert recase_chapter_opening("Y LA víspera de sábado", lexicon) == "Y la víspera de sábado"
    assert recase_chapter_opening("Y JEHOVÁ dijo", lexicon) == "Y Jehová dijo"
    assert recase_chapter_opening("EN el principio crió Dios") == "En el principio crió Dios"
    assert recase_chapter_opening("DE DOCE años era Manasés") == "De doce años era Manasés"
    assert recase_chapter_opening("Salmo de David. ¡OH Jehová") == "Salmo de David. ¡Oh Jehová"
    assert recase_chapter_opening("ALEPH. BIENAVENTURADOS los") == "ALEPH. Bienaventurados los"
    assert recase_chapter_opening("Y dijo Dios") == "Y dijo Dios"


def test_casing_lexicon_ignores_sentence_starts_and_capitals():
    lex = casing_lexicon(["Dijo Jehová: La paz.", "y Jehová dijo", "dame la mano", "JEHOVÁ"])
    assert lex["jehová"] == "Jehová" and lex["la"] == "la" and "dijo" in lex
    assert "dame" not in lex  # only seen sentence-initially


def test_enclitic_and_em_dash_markup():
    # RV1909 Gen 19:12: the added enclitic follows the verb's </w> directly
    raw = ('<w lemma="strong:H5892">en la ciudad</w>, <w lemma="strong:H3318">sáca</w>'
           '<transChange type="added">lo</transChange> <w lemma="strong:H4480">de</w>')
    assert osis_to_text(raw) == "en la ciudad, sácalo de"
    # an added word (not a pronoun) after </w> stays a word of its own (Gen 2:12)
    assert osis_to_text('<w>hay allí</w><transChange type="added">también</transChange>'
                        '<w>bdelio</w>') == "hay allí también bdelio"
    # WEB Gen 6:7: dashes between <w> elements get no spaces
    raw = ('<w lemma="strong:H0127">ground</w>—<w lemma="strong:H0120">man</w>, birds of the '
           '<w lemma="strong:H8064">sky</w>—<w lemma="strong:H3588">for</w> I')
    assert osis_to_text(raw) == "ground—man, birds of the sky—for I"


def test_strip_colophon():
    heb = ("La gracia sea con todos vosotros. Amén. Fué escrita á los Hebreos desde Italia con "
           "Timoteo.")
    assert bible.strip_colophon(heb) == "La gracia sea con todos vosotros. Amén."
    assert bible.strip_colophon("Amén.") == "Amén."


def _pair(i, es, en, book="Gen"):
    return (book, 1, i, es, en)


def test_deduplicate_and_decontaminate():
    train = [_pair(1, "Y dijo Dios: Sea la luz.", "God said, “Let there be light.”"),
             _pair(2, "Y dijo Dios: Sea la luz.", "God said, “Let there be light.”"),
             _pair(3, "Y vió Dios que la luz era buena.", "God saw the light, and saw that it was good."),
             _pair(4, "Estos son los nombres de los hijos de Israel.", "These are the names of the sons of Israel."),
             _pair(5, "Y llamó Dios á la luz Día.", "God called the light “day”.")]
    test = [_pair(1, "Y vió Dios que la luz era muy buena.", "God saw the light, and saw that it was very good.", "John")]
    valid = [_pair(1, "Y fué la tarde y la mañana un día.", "There was evening and there was morning, the first day.", "Acts")]
    kept, dropped = bible.deduplicate(train)
    assert dropped == 1 and [p[2] for p in kept] == [1, 3, 4, 5]
    splits, stats = bible.decontaminate({"train": train, "valid": valid, "test": test})
    assert stats["duplicate_pairs_dropped"] == 1
    assert stats["removed"] == ["Gen 1:3"]  # the near-copy of the test verse
    assert [p[2] for p in splits["train"]] == [1, 4, 5]
    assert splits["test"] == test and splits["valid"] == valid


def test_align_11_finds_shift():
    # target verse 3 is split into two, so the numbering is shifted by one from there on
    src = [120, 240, 360, 180, 270, 90, 210, 150]
    tgt = [123, 237, 150, 210, 183, 264, 93, 212, 148]
    assert align_11(src, tgt) == [(0, 0), (1, 1), (3, 4), (4, 5), (5, 6), (6, 7), (7, 8)]
    assert align_11(src, src) == [(i, i) for i in range(len(src))]


def test_pair_and_split_hold_out_books():
    es = ["Y aconteció en los días que gobernaban los jueces, que hubo hambre en la tierra.",
          "Y fué palabra de Jehová á Jonás hijo de Amittai, diciendo:",
          "Visión de Abdías. El Señor Jehová ha dicho así cuanto á Edom: Oído hemos el pregón.",
          "He aquí, pequeño te he hecho entre las gentes; abatido eres tú en gran manera."]
    en = ["In the days when the judges judged, there was a famine in the land.",
          "Now Yahweh’s word came to Jonah the son of Amittai, saying,",
          "The vision of Obadiah. This is what the Lord Yahweh says about Edom. We have heard news.",
          "Behold, I have made you small among the nations. You are greatly despised."]
    src = {("Ruth", 1, 1): es[0], ("Ruth", 1, 2): "", ("Jonah", 1, 1): es[1],
           ("Obad", 1, 1): es[2], ("Obad", 1, 2): es[3]}
    tgt = {("Ruth", 1, 1): en[0], ("Ruth", 1, 2): en[0] * 3, ("Jonah", 1, 1): en[1],
           ("Obad", 1, 1): en[2], ("Obad", 1, 2): en[3], ("Tob", 1, 1): "deuterocanon"}
    pairs, stats = bible.pair_verses(src, tgt)  # one-sided Ruth 1:2 and Tobit dropped
    assert [p[:3] for p in pairs] == [("Ruth", 1, 1), ("Jonah", 1, 1), ("Obad", 1, 1), ("Obad", 1, 2)]
    assert stats["one_sided"] == 1 and stats["pairs"] == 4
    splits = bible.split_pairs(pairs, test_books=["Jonah"], valid_books=["obad"])
    assert [p[0] for p in splits["train"]] == ["Ruth"]
    assert [p[0] for p in splits["test"]] == ["Jonah"]
    assert {p[0] for p in splits["valid"]} == {"Obad"}
    with pytest.raises(ValueError):
        bible.split_pairs(pairs, test_books=["Matt"], valid_books=["Obad"])


# --------------------------------------------------------------------------- real modules

@needs_modules
def test_real_verses_clean():
    rv = bible.clean_module(bible.read_module(bible.SRC_MODULE, ["Gen", "Ps", "John"]), recase=True)
    web = bible.clean_module(bible.read_module(bible.TGT_MODULE, ["Gen", "Ps", "John"]))
    assert web[("Gen", 1, 1)] == "In the beginning, God created the heavens and the earth."
    assert rv[("Gen", 1, 1)] == "En el principio crió Dios los cielos y la tierra."
    assert "only born Son" in web[("John", 3, 16)]
    # Psalm titles kept on both sides, poetry lines joined into one verse
    assert web[("Ps", 3, 1)].startswith("A Psalm by David, when he fled from Absalom his son. Yahweh")
    assert rv[("Ps", 3, 1)].startswith("Salmo de David, cuando huía de delante de Absalom")
    assert web[("Ps", 3, 2)] == ("Many there are who say of my soul, “There is no help for him "
                                 "in God.” Selah.")
    for verses in (rv, web):
        for ref, text in verses.items():
            assert "<" not in text and ">" not in text and "\n" not in text, ref
            assert "  " not in text and " ," not in text and " ." not in text, ref
    glued = [t for t in web.values() if "Godcreated" in t or "bornSon" in t]
    assert not glued


@needs_modules
def test_cleaning_defects_fixed_on_real_verses():
    books = ["Gen", "Matt", "Heb", "Rom"]
    rv = bible.clean_module(bible.read_module(bible.SRC_MODULE, books), recase=True)
    web = bible.clean_module(bible.read_module(bible.TGT_MODULE, books))
    assert "sácalo de este lugar" in rv[("Gen", 19, 12)]  # enclitic was split: "sáca lo"
    assert "Júramelo en este día" in rv[("Gen", 25, 33)]
    assert rv[("Matt", 28, 1)].startswith("Y la víspera de sábado")  # was "Y La víspera"
    assert rv[("Gen", 2, 1)].startswith("Y fueron acabados")
    assert "sky—for I am sorry" in web[("Gen", 6, 7)]  # was "sky — for"
    assert not any(" — " in t for t in web.values())
    assert rv[("Heb", 13, 25)] == "La gracia sea con todos vosotros. Amén."  # colophon dropped
    assert rv[("Rom", 16, 27)].endswith("para siempre. Amén.")


@needs_modules
def test_build_small_corpus_restartable(tmp_path, capsys):
    out = tmp_path / "bible"
    books = ["Ruth", "Jonah", "Obad", "Titus", "Phlm", "Jude", "2John", "3John"]
    stats = bible.build(out, vocab_size=300, test_books=["Jonah"], valid_books=["Obad"],
                        books=books)
    log = capsys.readouterr().out
    for stage in ("extract", "split", "audit", "spm", "encode", "binarize"):
        assert f"stage {stage}: done in" in log
    audit_report = json.loads((out / "audit.json").read_text())
    assert audit_report["splits"]["test"]["pairs"] == 37
    assert (out / "lookup.test.en").exists() and (out / "decontamination.json").exists()
    sp = stats["splits"]
    # Jonah: 48 verses, but RV1909 numbers 1:17 as 2:1 so all of chapter 2 (10) and 1:17 go
    assert sp["test"]["pairs"] == 37 and sp["valid"]["pairs"] == 21  # Obadiah: 21 verses
    assert 195 < sp["train"]["pairs"] <= 208  # Ruth 85 + Titus 46 + Phlm 25 + Jude 25 + 2-3John 27
    for split in bible.SPLITS:
        n = sp[split]["pairs"]
        for lang in ("es", "en"):
            assert pipeline.count_lines(out / "raw" / f"{split}.{lang}") == n
            assert pipeline.count_lines(out / "spm" / f"{split}.{lang}") == n
        ids = pipeline.read_lines(out / "raw" / f"{split}.ids")
        assert len(ids) == n
    train_books = {i.split()[0] for i in pipeline.read_lines(out / "raw" / "train.ids")}
    assert "Jonah" not in train_books and "Obad" not in train_books
    assert (out / "spm.model").exists() and json.loads((out / "stats.json").read_text())
    assert "| test | 1 | 37 |" in (out / "README.md").read_text()
    # the binarized data round-trips to the sentencepiece text
    from fairseq.data import Dictionary, data_utils

    d = Dictionary.load(str(out / "bin" / "dict.en.txt"))
    ds = data_utils.load_indexed_dataset(str(out / "bin" / "test.es-en.en"), d)
    assert len(ds) == 37
    assert d.string(ds[0]) == pipeline.read_lines(out / "spm" / "test.en")[0]
    first_en = pipeline.read_lines(out / "raw" / "test.en")[0]
    assert scoring.post_process(d.string(ds[0]), "sentencepiece") == first_en

    # rerun: everything skipped
    bible.build(out, vocab_size=300, test_books=["Jonah"], valid_books=["Obad"], books=books)
    log = capsys.readouterr().out
    assert log.count("done already, skipping") == 6
    # a run killed during "encode" leaves no marker: encode and what follows are redone
    (out / ".stages" / "encode.done").unlink()
    (out / "spm" / "test.en").write_text("partial\n")
    bible.build(out, vocab_size=300, test_books=["Jonah"], valid_books=["Obad"], books=books)
    log = capsys.readouterr().out
    assert "stage spm: done already" in log and "stage encode: done in" in log
    assert pipeline.count_lines(out / "spm" / "test.en") == 37
    # another vocabulary size redoes spm and its downstream stages, not extract/split
    bible.build(out, vocab_size=250, test_books=["Jonah"], valid_books=["Obad"], books=books)
    log = capsys.readouterr().out
    assert "stage split: done already" in log and "stage spm: redoing (parameters or an earlier stage changed)" in log
    assert "stage binarize: done in" in log


def test_missing_modules_message(tmp_path):
    with pytest.raises(bible.MissingModulesError) as err:
        bible.check_modules(tmp_path)
    assert "apt-get install sword-text-sparv sword-text-web" in str(err.value)
    proc = subprocess.run(
        [sys.executable, "-m", "fairseq_shared.cli.bible", "--out", str(tmp_path / "o"),
         "--sword-path", str(tmp_path)], capture_output=True, text=True, env=ENV, cwd=ROOT)
    assert proc.returncode == 2
    assert "apt-get install sword-text-sparv sword-text-web" in proc.stderr
    assert not (tmp_path / "o" / "raw").exists()


def test_install_script_when_present_or_not_root(tmp_path):
    script = ROOT / "scripts" / "install_system_packages.sh"
    if HAVE_MODULES:
        proc = subprocess.run(["bash", script], capture_output=True, text=True)
        assert proc.returncode == 0 and "present" in proc.stdout
    if os.geteuid() == 0:
        # the script goes in on stdin and runs from /: the checkout may sit in a directory
        # that the unprivileged user cannot read (a mktemp -d clone is mode 700)
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", "-s"]
        if subprocess.run(["which", "setpriv"], capture_output=True).returncode != 0:
            pytest.skip("no setpriv to run the script as a non-root user")
    else:
        cmd = ["bash", "-s"]
    proc = subprocess.run(cmd, input=script.read_text(), capture_output=True, text=True, cwd="/",
                          env=dict(ENV, SWORD_PATH=str(tmp_path)))
    assert proc.returncode == 1
    assert "apt-get install -y sword-text-sparv sword-text-web" in proc.stderr


# --------------------------------------------------------------------------- scoring

GEN_OUTPUT = """S-1\t▁b
T-1\t▁b
H-1\t-0.50\t▁the ▁cat ▁s at
D-1\t-0.50\tthe cat sat
P-1\t-0.1 -0.2
H-0\t-0.25\t▁Hello , ▁wor ld .
H-0\t-0.90\t▁Hi .
2024-01-01 | INFO | fairseq_cli.generate | Translated 2 sentences
H-2\t-1.00\t
"""


def test_extract_hypotheses_orders_and_decodes():
    hyps = scoring.extract_hypotheses(GEN_OUTPUT.splitlines(), post="sentencepiece")
    assert hyps == ["Hello, world.", "the cat sat", ""]
    assert scoring.extract_hypotheses(["H-0\t-1\tthe ne@@ w cat@@ s"], "subword_nmt") == \
        ["the new cats"]
    with pytest.raises(ValueError, match="lacks sentence ids"):
        scoring.extract_hypotheses(["H-0\t-1\ta", "H-2\t-1\tb"])


def test_score_values_and_cli(tmp_path):
    refs = ["The cat sat on the mat.", "It rained all day in the city."]
    perfect = scoring.score(refs, refs)
    assert perfect["bleu"] == 100.0 and perfect["chrf"] == 100.0
    assert perfect["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    import sacrebleu

    hyps = ["The cat sat on a mat.", "It rained the whole day in town."]
    got = scoring.score(hyps, refs)
    assert got["bleu"] == round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2)
    assert 0 < got["bleu"] < 100 and 0 < got["chrf"] < 100
    gen = tmp_path / "gen.out"
    gen.write_text("H-1\t-1\t▁It ▁rained ▁the ▁whole ▁day ▁in ▁town .\n"
                   "H-0\t-1\t▁The ▁cat ▁sat ▁on ▁a ▁mat .\n")
    ref = tmp_path / "ref.txt"
    ref.write_text("\n".join(refs) + "\n")
    proc = subprocess.run(
        [sys.executable, "-m", "fairseq_shared.cli.scoring", "--generate-output", gen,
         "--ref", ref, "--post-process", "sentencepiece", "--json-out", tmp_path / "s.json",
         "--hyp-out", tmp_path / "hyp.txt"], capture_output=True, text=True, env=ENV, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "s.json").read_text())["bleu"] == got["bleu"]
    assert (tmp_path / "hyp.txt").read_text().splitlines() == hyps
