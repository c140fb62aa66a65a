"""A ``PreTrainedTokenizerFast`` giving the ids of this project's pipeline: sentencepiece
pieces looked up in the fairseq dictionary, then EOS (fairseq's source), so that
``AutoTokenizer`` + ``AutoModelForSeq2SeqLM`` + ``generate`` translate raw text.

With the corpus's ``spm.model`` (a unigram model): a ``tokenizers`` Unigram model whose vocabulary
is the fairseq dictionary in its own id order, each piece with its sentencepiece score, and
sentencepiece's normaliser (its precompiled character map, read from the model file) and
whitespace handling. A sentencepiece piece that the dictionary lacks (never seen in the
training data) is left out: fairseq maps it to ``<unk>``, this tokenizer splits it into
smaller pieces; :func:`mismatches` counts such sentences on real text. Without ``spm.model``:
a word-level tokenizer over the dictionary (fairseq without ``--bpe``).
"""

import os
from typing import Dict, Iterator, List, Optional, Tuple

SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")


def _varint(buf: bytes, i: int) -> Tuple[int, int]:
    value, shift = 0, 0
    while True:
        b = buf[i]
        value |= (b & 0x7F) << shift
        i += 1
        if not b & 0x80:
            return value, i
        shift += 7


def _fields(buf: bytes) -> Iterator[Tuple[int, object]]:
    """(field number, value) of a protobuf message: the few types sentencepiece uses."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 1:
            value, i = buf[i:i + 8], i + 8
        elif wire == 2:
            size, i = _varint(buf, i)
            value, i = buf[i:i + size], i + size
        elif wire == 5:
            value, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        yield number, value


def sentencepiece_spec(path: str) -> Dict:
    """Model type and normaliser of a sentencepiece model file (ModelProto fields 2, 3)."""
    with open(path, "rb") as f:
        proto = f.read()
    spec = {"model_type": 1, "charsmap": b"", "add_dummy_prefix": True,
            "remove_extra_whitespaces": True}
    for number, value in _fields(proto):
        if number == 2:  # TrainerSpec: model_type = 3 (1 unigram, 2 bpe, 3 word, 4 char)
            spec["model_type"] = dict(_fields(value)).get(3, 1)
        elif number == 3:  # NormalizerSpec
            fields = dict(_fields(value))
            spec["charsmap"] = fields.get(2, b"")
            spec["add_dummy_prefix"] = bool(fields.get(3, 1))
            spec["remove_extra_whitespaces"] = bool(fields.get(4, 1))
    return spec


def _unigram(dictionary, spm_path: str):
    import sentencepiece
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    spec = sentencepiece_spec(spm_path)
    if spec["model_type"] != 1:
        raise ValueError(f"{spm_path}: a sentencepiece model of type {spec['model_type']}; "
                         "the Hugging Face tokenizer is written for unigram models only")
    sp = sentencepiece.SentencePieceProcessor(model_file=spm_path)
    scores = {sp.id_to_piece(i): sp.get_score(i) for i in range(sp.get_piece_size())
              if not (sp.is_control(i) or sp.is_unknown(i))}
    floor = min(scores.values()) - 100.0  # fairseq's padding symbols: never chosen
    vocab = [(dictionary[i], 0.0 if dictionary[i] in SPECIALS else scores.get(dictionary[i], floor))
             for i in range(len(dictionary))]
    tokenizer = Tokenizer(models.Unigram(vocab, unk_id=dictionary.unk()))
    steps = [normalizers.Precompiled(spec["charsmap"])] if spec["charsmap"] else []
    if spec["remove_extra_whitespaces"]:
        steps = [normalizers.Strip()] + steps + [normalizers.Replace(Regex(" {2,}"), " ")]
    tokenizer.normalizer = normalizers.Sequence(steps)
    scheme = "always" if spec["add_dummy_prefix"] else "never"
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme=scheme)
    tokenizer.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme=scheme)
    missing = sorted(set(scores) - set(dictionary.symbols))
    return tokenizer, missing


def _word_level(dictionary):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {s: i for i, s in enumerate(dictionary.symbols)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=dictionary.unk_word))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tokenizer


def build(dictionary, spm_path: Optional[str]):
    """The fast tokenizer (source side: text -> ids + EOS) and notes for the report."""
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast

    if spm_path:
        tokenizer, missing = _unigram(dictionary, spm_path)
        notes = [f"sentencepiece {os.path.basename(spm_path)} over the fairseq dictionary; "
                 f"{len(missing)} sentencepiece pieces absent from the dictionary"]
    else:
        tokenizer, notes = _word_level(dictionary), ["word level (no spm.model found)"]
    eos = dictionary.eos_word
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {eos}", pair=f"$A $B {eos}", special_tokens=[(eos, dictionary.eos())])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token=dictionary.bos_word, eos_token=eos,
        unk_token=dictionary.unk_word, pad_token=dictionary.pad_word)
    return fast, notes


def write(out_dir: str, src_dict, tgt_dict, spm_path: Optional[str]) -> List[str]:
    """The tokenizer of the source dictionary in ``out_dir``; with separate vocabularies the
    target's in ``out_dir/target_tokenizer`` (decode outputs with that one)."""
    tokenizer, notes = build(src_dict, spm_path)
    tokenizer.save_pretrained(out_dir)
    if src_dict != tgt_dict:
        target, _ = build(tgt_dict, spm_path)
        target.save_pretrained(os.path.join(out_dir, "target_tokenizer"))
        notes.append("separate vocabularies: decode with target_tokenizer/")
    return notes


def pipeline_ids(text: str, dictionary, spm_path: Optional[str]) -> List[int]:
    """The project's own ids of ``text``: sentencepiece pieces (if any), the dictionary, EOS."""
    if spm_path:
        import sentencepiece

        pieces = sentencepiece.SentencePieceProcessor(model_file=spm_path).encode(
            text, out_type=str)
        line = " ".join(pieces)
    else:
        line = text
    return dictionary.encode_line(line, add_if_not_exist=False, append_eos=True).tolist()


def mismatches(tokenizer, texts: List[str], dictionary, spm_path: Optional[str]) -> List[int]:
    """Indices of ``texts`` whose tokenizer ids differ from the project's pipeline."""
    return [i for i, t in enumerate(texts)
            if tokenizer(t)["input_ids"] != pipeline_ids(t, dictionary, spm_path)]
