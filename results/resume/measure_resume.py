"""What a fairseq-train resume reproduces (issue 57): train a toy model for 3 epochs (9 updates
each, an interval checkpoint every 5 updates and one per epoch), resume from every checkpoint
that is not the last, and compare the resumed run's final checkpoint_last.pt with the
uninterrupted run's, tensor by tensor, and its last valid loss.

    python results/resume/measure_resume.py OUT_DIR [--user-dir DIR] > results/resume/NAME.txt

Two models: the plug-in's transformer_cycle_rev (4+4 layers over 2 sets, d 32) and fairseq's own
transformer (2+2, d 32), both under --user-dir (the plug-in's compat lets torch >= 2.6 load a
fairseq checkpoint at all). ``--user-dir`` picks the plug-in checkout to measure (default: this
one); the corpus is the tests' toy corpus (tests/helpers_data.py).
"""

import argparse
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

import torch  # noqa: E402

from helpers_data import TINY_ARCH, TINY_TRAIN, USER_DIR, _make_corpus, run_tool  # noqa: E402

VALID = re.compile(r"valid on 'valid' subset \| loss ([\d.]+)")


def models(user_dir):
    plugin = ["--user-dir", user_dir, *TINY_ARCH[2:]]  # TINY_ARCH starts with --user-dir X
    stock = ["--user-dir", user_dir, "--arch", "transformer", "--share-all-embeddings",
             *(f for side in ("encoder", "decoder") for f in (
                 f"--{side}-layers", "2", f"--{side}-embed-dim", "32",
                 f"--{side}-ffn-embed-dim", "64", f"--{side}-attention-heads", "2")),
             "--dropout", "0", "--attention-dropout", "0", "--activation-dropout", "0"]
    return {"transformer_cycle_rev": plugin, "transformer": stock}


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path, help="work directory (corpus, runs)")
    p.add_argument("--user-dir", default=USER_DIR, help="the plug-in to measure")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not (args.out / "bin").is_dir():
        _make_corpus(args.out)
    print("model | resumed from | epoch | batches into it | tensors equal | max abs diff | "
          "last valid loss (uninterrupted)")
    for name, arch in models(args.user_dir).items():
        flags = [*arch, *TINY_TRAIN, "--max-tokens", "150", "--seed", "2",
                 "--save-interval-updates", "5", "--keep-interval-updates", "100",
                 "--max-epoch", "3"]
        full = args.out / f"{name}_uninterrupted"
        shutil.rmtree(full, ignore_errors=True)
        _, log = run_tool("fairseq-train", args.out / "bin", *flags, "--save-dir", full,
                          timeout=3000)
        expected = torch.load(full / "checkpoint_last.pt", weights_only=True)["model"]
        loss = VALID.findall(log)[-1]
        starts = [c for c in sorted(full.glob("checkpoint*.pt"))
                  if c.name not in ("checkpoint_last.pt", "checkpoint_best.pt", "checkpoint3.pt")]
        for start in starts:
            state = torch.load(start, weights_only=True)["extra_state"]["train_iterator"]
            run = args.out / f"{name}_from_{start.stem}"
            shutil.rmtree(run, ignore_errors=True)
            run.mkdir()
            shutil.copy(start, run / "checkpoint_last.pt")
            _, resumed_log = run_tool("fairseq-train", args.out / "bin", *flags, "--save-dir",
                                      run, timeout=3000)
            got = torch.load(run / "checkpoint_last.pt", weights_only=True)["model"]
            equal = sum(torch.equal(got[k], expected[k]) for k in expected)
            diff = max((got[k].double() - expected[k].double()).abs().max().item()
                       for k in expected)
            print(f"{name} | {start.name} | {state['epoch']} | {state['iterations_in_epoch']} | "
                  f"{equal} of {len(expected)} | {diff:.3g} | {VALID.findall(resumed_log)[-1]} "
                  f"({loss})", flush=True)


if __name__ == "__main__":
    main()
