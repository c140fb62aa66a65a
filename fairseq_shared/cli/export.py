"""Export a fairseq-shared checkpoint for deployment (see docs/export.md): a translation model
as fairseq's ``transformer``, a language model as its ``transformer_lm``.

    python -m fairseq_shared.cli.export CHECKPOINT --out DIR [--ct2 [--quantization TYPE]]
        [--hf [--hf-form shared|stock]] [--data DATA_BIN] [--sentences 100]

Exit status: 0 exported and verified, 1 the verification failed (nothing moved into --out),
2 bad input (one line; --debug shows the traceback).
"""

import argparse
import sys

from fairseq_shared.cli.errors import command
from fairseq_shared.export.ct2 import QUANTIZATIONS


@command(status=2)  # 1 is a failed verification
def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n")[2],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", help="a fairseq-shared checkpoint (shared_transformer, or "
                   "shared_transformer_lm; a SAN model with --hf only)")
    p.add_argument("--out", required=True, help="directory for checkpoint.pt, dictionaries, ct2/ "
                   "(written beside it, moved into place once verified; it may hold only the "
                   "files an earlier export's export.json lists)")
    p.add_argument("--force", action="store_true",
                   help="replace --out whole even if it holds files an earlier export did not write")
    p.add_argument("--ct2", action="store_true", help="also write a CTranslate2 model (float32)")
    p.add_argument("--quantization", choices=QUANTIZATIONS,
                   help="with --ct2: also a quantized CTranslate2 model in DIR/ct2_<type>")
    p.add_argument("--hf", action="store_true",
                   help="also write DIR/hf: a Hugging Face transformers model, tokenizer and "
                   "generation_config.json (needs the extra fairseq_shared[export]); see --hf-form")
    p.add_argument("--hf-form", choices=("shared", "stock"),
                   help="with --hf: shared (an M2M100 subclass shipped as remote code, each tied "
                   "tensor stored once, SAN models too) or stock (M2M100 for pre-LN, FSMT for "
                   "post-LN, tied layers written as copies); default: shared where it applies "
                   "(pre-LN, not LoRA-relaxed), else stock")
    p.add_argument("--data", help="binarized data dir (dictionaries, verification sentences); "
                   "default: the checkpoint's own")
    p.add_argument("--subset", default="test", help="split whose sentences verify the export")
    p.add_argument("--sentences", type=int, default=100,
                   help="sentences to verify on, evenly spaced (0: no verification); a language "
                   "model: samples scored with teacher forcing")
    translation = "translation models' verification: "
    p.add_argument("--beam", type=int, default=4, help=translation + "beam size")
    p.add_argument("--lenpen", type=float, default=1.0, help=translation + "length penalty")
    p.add_argument("--max-len-a", type=float, default=0.0, help=translation + "max_len_a")
    p.add_argument("--max-len-b", type=int, default=200, help=translation + "max_len_b")
    args = p.parse_args(argv)

    from fairseq_shared.export.api import export, summary

    report = export(
        args.checkpoint, args.out, ct2=args.ct2, quantization=args.quantization, hf=args.hf,
        data=args.data, subset=args.subset, sentences=args.sentences, beam=args.beam,
        lenpen=args.lenpen, max_len_a=args.max_len_a, max_len_b=args.max_len_b,
        force=args.force, hf_form=args.hf_form,
    )
    print(summary(report))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
