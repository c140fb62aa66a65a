"""Propose which layers should share parameters, from how alike a trained model's layers are
(the library side of ``python -m fairseq_shared.cli.learn_sharing``).

Per stack, the similarity of every pair of layers is one of two measures
(:mod:`fairseq_shared.tools.layer_similarity`):

- ``cka`` (default): linear CKA of the layers' outputs on held-out data: encoder layers on
  the source tokens, decoder layers with teacher forcing on the references, pad positions
  left out (:func:`collect_outputs`, through fairseq's own ``return_all_hiddens`` /
  ``inner_states``; no hooks).
- ``cka_update``: linear CKA of what each layer *adds* to the residual stream (its output
  minus its input), on the same tokens.
- ``weights``: cosine of the layers' flattened parameters (reads no held-out data).

Why CKA by default: it compares what layers compute, not how their parameters happen to be
written. Weights of a model trained from independent random initialisations stay close to
orthogonal between layers, and a layer's function is unchanged by permuting its FFN units
or attention heads, which scrambles its weights, so weight cosine says little about a model
trained without sharing (it is exact for layers that *are* tied or copied). CKA is invariant
to orthogonal transforms and isotropic scaling of a representation, the symmetries left
after training, and is the measure shown to identify corresponding layers across networks
(Kornblith et al. 2019). Its caveat here: the residual stream makes adjacent layers' outputs
alike, so CKA favours neighbours; that suits adjacent (Xiao-style) groups, and the weight
measure is there to cross-check. In a trained pre-LN model the residual stream can dominate
every layer's output (on a 6+6-layer pilot model output CKA was 0.92-1.00 between all
decoder layers), and then ``cka_update``, which leaves the shared stream out, separates the
layers' own contributions.

Patterns: ``adjacent`` (exact best contiguous groups) and ``clustered`` (average linkage,
any layers), with M sets (``sets``) or from a threshold (``threshold``). :func:`learn_sharing`
writes ``DIR/sharing.json`` (matrices, patterns, settings), ``DIR/sharing.txt`` (the flags
of the chosen grouping) and ``DIR/similarity.png`` (heat-maps with the groups outlined).
"""

import json
import logging
import os
from typing import Dict, Iterable, List, Optional

import torch

from fairseq_shared import checkpoint_io
from fairseq_shared.checkpoint_io import write_text
from fairseq_shared.models.architectures import MODEL
from fairseq_shared.sharing.flags import STACKS
from fairseq_shared.tools import layer_similarity as ls
from fairseq_shared.tools.checkpoints import Takes, open_checkpoint

logger = logging.getLogger("fairseq_shared.learn_sharing")

TOOL = "learn_sharing"
TAKES = Takes("learn a sharing map from", ("transformer", MODEL))
MEASURES = ("cka", "cka_update", "weights")  # the first is the default
GROUPINGS = ("adjacent", "clustered")  # the first is the default
MAX_SENTENCES, MAX_TOKENS = 400, 4000
#: The files :func:`learn_sharing` writes into its output directory.
OUTPUTS = ("sharing.json", "sharing.txt", "similarity.png")


class LearnSharingError(ValueError):
    """Bad settings for the command; the message names the flag and the allowed values."""


# ---------------------------------------------------------------------------- measures
def collect_outputs(model, batches: Iterable[Dict], pad: int,
                    updates: bool = False) -> Dict[str, List[torch.Tensor]]:
    """Each layer's output at every non-pad token: ``{stack: [(n_tokens, d)] per layer}``
    (``updates``: the output minus the layer's input, what the layer adds).

    ``batches`` are fairseq ``net_input`` dicts (``src_tokens``, ``src_lengths``,
    ``prev_output_tokens``); the decoder runs with teacher forcing on ``prev_output_tokens``.
    """
    rows: Dict[str, List[List[torch.Tensor]]] = {
        s: [[] for _ in getattr(model, s).layers] for s in STACKS
    }
    with torch.no_grad():
        for net in batches:
            src, prev = net["src_tokens"], net["prev_output_tokens"]
            encoder_out = model.encoder(src, src_lengths=net["src_lengths"],
                                        return_all_hiddens=True)
            _, extra = model.decoder(prev, encoder_out=encoder_out)
            for stack, states, keep in (
                ("encoder", encoder_out["encoder_states"], src.ne(pad)),
                ("decoder", extra["inner_states"], prev.ne(pad)),
            ):
                layers = rows[stack]
                assert len(states) == len(layers) + 1  # [embeddings, layer 1, ..., layer L]
                for out, x_in, x in zip(layers, states[:-1], states[1:]):
                    y = x - x_in if updates else x
                    out.append(y.transpose(0, 1)[keep].float())  # T B C -> tokens C
    return {s: [torch.cat(r) for r in layers] for s, layers in rows.items()}


def layer_vectors(model, stack: str) -> List[torch.Tensor]:
    """Every layer's parameters flattened, over the names all layers have (SAN followers
    lack Q/K), merged as the model computes (tied sets are equal)."""
    full = model.full_state_dict() if hasattr(model, "full_state_dict") else model.state_dict()
    n = len(getattr(model, stack).layers)
    prefix = f"{stack}.layers."
    names = [
        {k[len(f"{prefix}{i}."):] for k in full if k.startswith(f"{prefix}{i}.")}
        for i in range(n)
    ]
    common = sorted(set.intersection(*names))
    return [torch.cat([full[f"{prefix}{i}.{k}"].flatten().double() for k in common])
            for i in range(n)]


def batches(task, subset: str, max_sentences: int, max_tokens: int):
    """The ``net_input`` of every batch of ``subset``, in order, up to ``max_sentences``."""
    task.load_dataset(subset)
    itr = task.get_batch_iterator(
        dataset=task.dataset(subset), max_tokens=max_tokens, max_positions=None,
        ignore_invalid_inputs=True, required_batch_size_multiple=1, seed=1,
    ).next_epoch_itr(shuffle=False)
    seen = 0
    for sample in itr:
        if seen >= max_sentences:
            break
        seen += sample["net_input"]["src_tokens"].size(0)
        yield sample["net_input"]


# ---------------------------------------------------------------------------- patterns
def propose(sim: torch.Tensor, sets: Optional[int], threshold: Optional[float],
            stack: str) -> Dict[str, List[int]]:
    """Both patterns (0-based sets) for one stack's similarity matrix."""
    N = sim.size(0)
    if sets is not None:
        if not 1 <= sets <= N:
            raise LearnSharingError(f"--sets {sets}: the {stack} has {N} layers; allowed: "
                                    f"1 to {N}")
        return {"adjacent": ls.adjacent_partition(sim, sets),
                "clustered": ls.average_linkage(sim, sets)}
    return {"adjacent": ls.threshold_adjacent(sim, threshold),
            "clustered": ls.threshold_linkage(sim, threshold)}


def check_settings(sets, threshold, measure, grouping) -> None:
    if (sets is None) == (threshold is None):
        raise LearnSharingError("give exactly one of --sets M (an integer >= 1) and "
                                "--threshold T (a similarity, e.g. 0.9)")
    if measure not in MEASURES:
        raise LearnSharingError(f"--measure {measure}: allowed: {', '.join(MEASURES)}")
    if grouping not in GROUPINGS:
        raise LearnSharingError(f"--grouping {grouping}: allowed: {', '.join(GROUPINGS)}")


def flag_line(patterns: Dict[str, Dict[str, List[int]]], grouping: str) -> str:
    return " ".join(f"--{s}-share-strategy {ls.pattern_flag(p[grouping])}"
                    for s, p in patterns.items())


# ---------------------------------------------------------------------------- output
def plot(matrices: Dict[str, Dict[str, torch.Tensor]], patterns, measure: str, path: str,
         title: str = "") -> None:
    from fairseq_shared.plotting import pyplot

    plt = pyplot()
    from matplotlib.patches import Rectangle

    rows = [m for m in MEASURES if m in matrices[STACKS[0]]]
    fig, axes = plt.subplots(len(rows), len(STACKS), figsize=(4.2 * len(STACKS), 3.8 * len(rows)),
                             squeeze=False)
    labels = {"cka": "linear CKA of outputs", "cka_update": "linear CKA of layer updates",
              "weights": "cosine of weights"}
    for r, m in enumerate(rows):
        for c, stack in enumerate(STACKS):
            ax, sim = axes[r][c], matrices[stack][m].numpy()
            L = sim.shape[0]
            im = ax.imshow(sim, cmap="viridis", vmin=min(0.0, float(sim.min())), vmax=1.0)
            ax.set_title(f"{stack}: {labels[m]}" + (" (used)" if m == measure else ""),
                         fontsize=9)
            ax.set_xticks(range(L), [str(i + 1) for i in range(L)])
            ax.set_yticks(range(L), [str(i + 1) for i in range(L)])
            for i in range(L):
                for j in range(L):
                    ax.text(j, i, f"{sim[i, j]:.2f}", ha="center", va="center", fontsize=6,
                            color="white" if sim[i, j] < 0.6 else "black")
            start, pattern = 0, patterns[stack]["adjacent"]
            for i in range(1, L + 1):  # outline the adjacent groups
                if i == L or pattern[i] != pattern[start]:
                    ax.add_patch(Rectangle((start - 0.5, start - 0.5), i - start, i - start,
                                           fill=False, edgecolor="red", linewidth=1.5))
                    start = i
            fig.colorbar(im, ax=ax, shrink=0.8)
    if title:
        fig.suptitle(title, fontsize=9)
    kind = os.path.splitext(path)[1][1:] or "png"
    checkpoint_io.atomic_write(path, lambda f: fig.savefig(f, format=kind, dpi=120,
                                                           bbox_inches="tight"))
    plt.close(fig)


def similarity_matrices(model, task, measure: str, subset: str, max_sentences: int,
                        max_tokens: int):
    """``({stack: {measure: (L, L)}}, {stack: tokens compared})``: weight cosine always
    (cheap), CKA when it is the measure."""
    matrices = {s: {"weights": ls.cosine_matrix(layer_vectors(model, s))} for s in STACKS}
    tokens = {s: None for s in STACKS}
    if measure in ("cka", "cka_update"):
        pad = task.target_dictionary.pad()
        outputs = collect_outputs(model, batches(task, subset, max_sentences, max_tokens), pad,
                                  updates=measure == "cka_update")
        for stack, feats in outputs.items():
            matrices[stack][measure] = ls.cka_matrix(feats)
            tokens[stack] = feats[0].size(0)
    return matrices, tokens


def learn_sharing(checkpoint: str, out_dir: str, data: Optional[str] = None,
                  sets: Optional[int] = None, threshold: Optional[float] = None,
                  measure: str = MEASURES[0], grouping: str = GROUPINGS[0],
                  subset: str = "valid", max_sentences: int = MAX_SENTENCES,
                  max_tokens: int = MAX_TOKENS) -> Dict:
    check_settings(sets, threshold, measure, grouping)
    checkpoint_io.refuse_overwrite([checkpoint], checkpoint_io.files_in(out_dir, OUTPUTS))
    loaded = open_checkpoint(checkpoint, TOOL, TAKES, data=data)
    matrices, tokens = similarity_matrices(loaded.model, loaded.task, measure, subset,
                                           max_sentences, max_tokens)
    patterns = {s: propose(matrices[s][measure], sets, threshold, s) for s in STACKS}
    flags = flag_line(patterns, grouping)
    record = {
        "checkpoint": os.path.abspath(checkpoint),
        "measure": measure,
        "settings": {"sets": sets, "threshold": threshold, "grouping": grouping,
                     "subset": subset if measure != "weights" else None,
                     "max_sentences": max_sentences},
        "objective": "sum over groups of (1/|g|) sum_{i,j in g} S_ij (= N - within-group "
                     "scatter); threshold: every pair in an adjacent group >= T",
        "flags": flags,
        "stacks": {
            s: {
                "layers": matrices[s][measure].size(0),
                "tokens": tokens[s],
                "patterns": {g: ls.pattern_flag(p) for g, p in patterns[s].items()},
                "scores": {g: round(ls.partition_score(matrices[s][measure], p), 6)
                           for g, p in patterns[s].items()},
                "similarity": {m: [[round(float(x), 6) for x in row] for row in sim]
                               for m, sim in matrices[s].items()},
            }
            for s in STACKS
        },
    }
    os.makedirs(out_dir, exist_ok=True)
    write_text(os.path.join(out_dir, "sharing.json"), json.dumps(record, indent=1))
    write_text(os.path.join(out_dir, "sharing.txt"), flags + "\n")
    setting = f"M={sets}" if sets is not None else f"T={threshold}"
    plot(matrices, patterns, measure, os.path.join(out_dir, "similarity.png"),
         title=f"{os.path.basename(checkpoint)}: {measure}, {setting}; {flags}")
    logger.info(f"sharing: {flags}")
    return record
