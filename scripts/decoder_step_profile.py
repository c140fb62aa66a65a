"""Where a decode's CPU time goes, by part of the model (issue 22: why dropping the decoder
FFNs does not make decoding faster here).

    python scripts/decoder_step_profile.py results/bible_budget/models/vanilla_s1.pt \\
        results/bible_budget/models/nodec_ffn_s1.pt --names vanilla nodec_ffn --data work/bible \\
        --out results/bible_budget/frontier/step_profile.md

Decodes the test set as the frontier does (beam 4, max length 1.2 x source + 10, one thread,
eager fairseq) at each batch size, with wrapped forwards that add up the CPU time
(``time.process_time``) spent in the encoder, in each decoder layer's self-attention,
encoder-decoder attention and FFN (fc1 + fc2, the activation between them is not a module and
counts as "decoder, rest"), in the output projection, and in the whole decoder forward. What is
left of the pass is the search: beam bookkeeping, the cache reordering, the batch loop. The
wrappers cost a few microseconds per call, so the pass is a little slower than the frontier's.
"""

import argparse
import os
import shlex
import sys
import time
from collections import defaultdict

DECODER_PARTS = ["decoder self-attention", "decoder encoder-attention", "decoder FFN",
                 "output projection"]
GROUPS = ["encoder", *DECODER_PARTS, "decoder, rest", "search and the rest"]


class Unwrap:
    """Removes an instance attribute that shadows a method (a handle, as hooks have)."""

    def __init__(self, owner, name):
        self.owner, self.name = owner, name

    def remove(self):
        # the decode trace (fairseq_shared.timing.trace) wraps decoder.forward over this one
        # during a pass and removes the instance attribute when the pass ends
        self.owner.__dict__.pop(self.name, None)


def clock(owner, method, spent, group):
    """Shadow ``owner.method`` with a wrapper adding its CPU seconds to ``spent[group]``.
    Wrapping the bound method, not registering module hooks, because fairseq's search calls
    ``encoder.forward_torchscript`` and ``decoder.forward`` directly, past any hook."""
    fn = getattr(owner, method)

    def wrapper(*args, **kwargs):
        start = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[group] += time.process_time() - start
    setattr(owner, method, wrapper)
    return Unwrap(owner, method)


def clock_groups(model, spent):
    """Clock the encoder, the decoder and the decoder's parts into ``spent``; the handles."""
    handles = [clock(model.encoder, "forward_torchscript", spent, "encoder"),
               clock(model.decoder, "forward", spent, "decoder")]
    for layer in model.decoder.layers:
        handles.append(clock(layer.self_attn, "forward", spent, "decoder self-attention"))
        handles.append(clock(layer.encoder_attn, "forward", spent, "decoder encoder-attention"))
        for name in ("fc1", "fc2"):
            if getattr(layer, name, None) is not None:
                handles.append(clock(getattr(layer, name), "forward", spent, "decoder FFN"))
    handles.append(clock(model.decoder.output_projection, "forward", spent,
                         "output projection"))
    return handles


def profile(checkpoint, data, batch_size):
    from fairseq_shared.timing.session import Session

    session = Session(data, checkpoint, ["--beam", "4", "--lenpen", "1.0", "--batch-size",
                                         str(batch_size), "--max-len-a", "1.2", "--max-len-b",
                                         "10", "--cpu"], threads=1)
    loaded = session.load(os.path.basename(checkpoint), checkpoint)
    loaded.run_pass(max_batches=8, longest=True, check=False)  # warm-up, as the frontier's
    spent = defaultdict(float)
    handles = clock_groups(loaded.models[0], spent)
    result, _ = loaded.run_pass()
    for h in handles:
        h.remove()
    parts = {g: spent[g] for g in ("encoder", *DECODER_PARTS)}
    parts["decoder, rest"] = spent["decoder"] - sum(spent[g] for g in DECODER_PARTS)
    parts["search and the rest"] = result.cpu_seconds - spent["encoder"] - spent["decoder"]
    steps = result.trace["steps"] if result.trace else None
    return {"cpu_seconds": result.cpu_seconds, "output_tokens": result.tokens,
            "steps": steps, "parts": parts}


def markdown(rows, command):
    lines = ["# Where a decode's CPU time goes", "", f"Command: `{command}`", "",
             "CPU seconds of one pass over the test set (eager fairseq, beam 4, one thread), "
             "split by wrapped forwards; in brackets the share of the pass.", "",
             "| model | batch | CPU s | decoder steps | " + " | ".join(GROUPS) + " |",
             "|---|---:|---:|---:|" + "---:|" * len(GROUPS)]
    for r in rows:
        total = r["cpu_seconds"]
        cells = [f"{r['parts'][g]:.2f} ({100 * r['parts'][g] / total:.0f}%)" for g in GROUPS]
        lines.append(f"| {r['model']} | {r['batch']} | {total:.2f} | {r['steps']} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines + [""])


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoints", nargs="+")
    p.add_argument("--names", nargs="+", help="one per checkpoint (default: file names)")
    p.add_argument("--data", required=True)
    p.add_argument("--batch-sizes", default="1,32")
    p.add_argument("--out", required=True, help="markdown file (JSON beside it)")
    args = p.parse_args(argv)
    names = args.names or [os.path.basename(c) for c in args.checkpoints]
    if len(names) != len(args.checkpoints):
        p.error(f"--names: {len(names)} names for {len(args.checkpoints)} checkpoints")
    rows = []
    for bs in (int(b) for b in args.batch_sizes.split(",")):
        for name, ckpt in zip(names, args.checkpoints):
            rows.append({"model": name, "batch": bs, **profile(ckpt, args.data, bs)})
            print(f"{name} b={bs}: {rows[-1]['cpu_seconds']:.1f} CPU s", file=sys.stderr)
    command = "python scripts/decoder_step_profile.py " + " ".join(shlex.quote(a) for a in argv)
    from fairseq_shared.markdown import write_report

    text = markdown(rows, command)
    write_report(args.out, text, {"command": command, "rows": rows})
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
