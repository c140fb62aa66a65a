"""A prepared corpus's layout: the fairseq-preprocess directory, the language pair, whether
the dictionaries are joined."""

import os
import re

def corpus_paths(data: str):
    """-> (bin_dir, src, tgt, joined). Data is the corpus root (with bin/) or a bin dir."""
    from fairseq_shared.timing import resolve_data

    bin_dir, _ = resolve_data(data)
    dicts = sorted(f for f in os.listdir(bin_dir) if re.fullmatch(r"dict\.[^.]+\.txt", f))
    pairs = sorted({m.group(1) for f in os.listdir(bin_dir)
                    for m in [re.fullmatch(r"train\.([^.]+-[^.]+)\.[^.]+\.bin", f)] if m})
    if not pairs:
        raise SystemExit(f"{bin_dir}: no fairseq-preprocess output (train.SRC-TGT.*.bin)")
    src, tgt = pairs[0].split("-")
    d1 = os.path.join(bin_dir, f"dict.{src}.txt")
    d2 = os.path.join(bin_dir, f"dict.{tgt}.txt")
    joined = open(d1, "rb").read() == open(d2, "rb").read() if len(dicts) == 2 else False
    return bin_dir, src, tgt, joined


def corpus_ready(root: str) -> bool:
    """Whether ``root`` holds the prepared Bible corpus (spm.model, raw/, bin/ es-en)."""
    bin_dir = os.path.join(root, "bin")
    need = [os.path.join(root, "spm.model"), os.path.join(root, "raw", "test.en"),
            os.path.join(bin_dir, "dict.es.txt"), os.path.join(bin_dir, "test.es-en.en.bin"),
            os.path.join(bin_dir, "train.es-en.es.bin")]
    return all(os.path.exists(p) for p in need)


#: ``data`` values of a configuration: where its training split comes from.
TRAINING_DATA = ("raw", "distilled")


def training_bin(data: str, config_data: str = "raw") -> str:
    """The binarized directory a configuration trains on: the corpus's own, or with
    ``data: distilled`` the teacher's distilled corpus ``<corpus>/distilled/bin``
    (``python -m fairseq_shared.cli.distill`` writes it; docs/distill.md)."""
    from fairseq_shared.timing import resolve_data

    bin_dir, root = resolve_data(data)
    if config_data == "raw":
        return bin_dir
    if config_data != "distilled":
        raise SystemExit(f"configuration data: {config_data!r}; allowed: "
                         f"{', '.join(TRAINING_DATA)}")
    distilled = os.path.join(root or os.path.dirname(bin_dir), "distilled", "bin")
    if not os.path.exists(os.path.join(os.path.dirname(distilled), "manifest.json")):
        raise SystemExit(f"{distilled}: no distilled corpus (a configuration with data: "
                         f"distilled trains on it); write it with python -m "
                         f"fairseq_shared.cli.distill --teacher CKPT --data {data}")
    return distilled
