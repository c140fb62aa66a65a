"""Learn a SAN policy from a trained model's attention on held-out data (Xiao et al. 2019).

The library side of ``python -m fairseq_shared.cli.learn_policy``. :func:`collect` runs the
decoder with teacher forcing on the references of a subset and accumulates, for every pair of
decoder layers, the mean Jensen-Shannon divergence (log base 2) of their attention
distributions, self and encoder-decoder, per head (each head against the same head of the
other layer: what SAN shares) and between head-averaged distributions
(:class:`SimilarityAccumulator`). ``mu = 1 - JS``; :func:`learn` forms blocks greedily from
layer 1, largest block with mean pairwise similarity > theta first (see
:mod:`fairseq_shared.san.policy`). :func:`learn_policy` does both and writes ``DIR/policy.json``,
``DIR/policy.txt`` (the fairseq-train flags), ``DIR/similarity.png`` (JS heat-maps in the
style of the paper's Figure 2) and, with ``sweep_thetas``, ``DIR/sweep.md``. The attention is
recorded by :class:`AttentionRecorder` (forward hooks; the model's forward pass untouched).

In a model that already shares attention, a follower's distributions *are* its leader's
(JS 0), so re-learning can merge blocks but does not split one. That is what the
paper's LEARNTOSHARE loop re-learns from (the followers own no Q/K to compare with).
"""

import json
import logging
import os
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from fairseq_shared import checkpoint_io
from fairseq_shared.checkpoint_io import write_text
from fairseq_shared.models.architectures import MODEL
from fairseq_shared.san.attention import is_follower
from fairseq_shared.san.policy import format_policy, group_layers, pairwise_js_sums
from fairseq_shared.tools.checkpoints import Takes, open_checkpoint

logger = logging.getLogger("fairseq_shared.learn_policy")

TOOL = "learn_policy"
#: The settings' defaults (the commands learn_policy and learn_to_share take them from here).
THETA = 0.9
SIMILARITIES = ("per_head", "head_avg")  # the first is the default
MAX_SENTENCES, MAX_TOKENS = 400, 4000
#: The files :func:`learn_policy` writes into its output directory.
OUTPUTS = ("policy.json", "policy.txt", "similarity.png", "sweep.md")
KINDS = ("self_per_head", "self_head_avg", "cross_per_head", "cross_head_avg")
#: What the tool takes: the models with SAN layers, any policy (none: learn a first one).
TAKES = Takes("learn a SAN policy from", (MODEL,))
#: The attention an :class:`AttentionRecorder` records per layer.
RECORDED = ("self", "cross")


class AttentionRecorder:
    """Every decoder layer's attention weights, per head, recorded with forward hooks::

        with AttentionRecorder(model.decoder) as recorder:
            model(**net_input)
            selfs, crosses = recorder.pop()   # per layer (H, B, T, S), or None

    The hooks ask each computing attention module for its per-head weights (fairseq's own
    ``need_head_weights``) and keep them; a follower's distributions are its leader's. The
    model's forward pass is untouched; the hooks are gone when the block ends.
    """

    def __init__(self, decoder):
        self.layers = list(decoder.layers)
        self.records: Dict[Tuple[str, int], Tensor] = {}
        self._handles = []
        self._skip_check = []

    def __enter__(self) -> "AttentionRecorder":
        for i, layer in enumerate(self.layers):
            for kind, attention in zip(RECORDED, (layer.self_attn, layer.encoder_attn)):
                if attention is not None and not is_follower(attention):
                    self._watch(kind, i, attention)
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        for attention, value in self._skip_check:
            attention.skip_embed_dim_check = value
        self._handles, self._skip_check = [], []
        self.records.clear()

    def _watch(self, kind: str, index: int, attention) -> None:
        # PyTorch's fused path returns head averages only; fairseq's returns every head
        self._skip_check.append((attention, attention.skip_embed_dim_check))
        attention.skip_embed_dim_check = True

        def ask_for_heads(module, args, kwargs):
            return args, {**kwargs, "need_weights": True, "need_head_weights": True}

        def keep(module, args, kwargs, output):
            self.records[(kind, index)] = output[1]

        self._handles += [
            attention.register_forward_pre_hook(ask_for_heads, with_kwargs=True),
            attention.register_forward_hook(keep, with_kwargs=True),
        ]

    def pop(self) -> Tuple[List[Optional[Tensor]], List[Optional[Tensor]]]:
        """The last forward pass's (self, cross) weights per layer; followers get their
        leader's (the nearest computing layer before them: blocks are adjacent)."""
        out = []
        for kind in RECORDED:
            maps: List[Optional[Tensor]] = []
            last: Optional[Tensor] = None
            for i in range(len(self.layers)):
                last = self.records.get((kind, i), last)
                maps.append(last)
            out.append(maps)
        self.records.clear()
        return out[0], out[1]


class SimilarityAccumulator:
    """Running pairwise JS sums for the four kinds of distribution."""

    def __init__(self, num_layers: int):
        self.L = num_layers
        self.sums = {k: torch.zeros(num_layers, num_layers, dtype=torch.float64) for k in KINDS}
        self.counts = {k: 0.0 for k in KINDS}

    def add(self, kind: str, dists: torch.Tensor, weights: torch.Tensor) -> None:
        s, c = pairwise_js_sums(dists, weights)
        self.sums[kind] += s
        self.counts[kind] += float(c)

    def add_batch(self, selfs: List[torch.Tensor], crosses: List[torch.Tensor], keep: torch.Tensor) -> None:
        """``selfs``/``crosses``: per layer (H, B, T, S); ``keep``: (B, T) non-pad targets."""
        for name, maps in (("self", selfs), ("cross", crosses)):
            if not maps or maps[0] is None:
                continue
            d = torch.stack([m.double() for m in maps])  # L H B T S
            H = d.size(1)
            self.add(f"{name}_per_head", d, keep.unsqueeze(0).expand(H, -1, -1))
            self.add(f"{name}_head_avg", d.mean(1), keep)

    def js(self) -> Dict[str, torch.Tensor]:
        return {k: self.sums[k] / max(self.counts[k], 1e-12) for k in KINDS if self.counts[k] > 0}


def collect(model, task, subset: str, max_sentences: int,
            max_tokens: int = MAX_TOKENS) -> SimilarityAccumulator:
    task.load_dataset(subset)
    dataset = task.dataset(subset)
    itr = task.get_batch_iterator(
        dataset=dataset, max_tokens=max_tokens, max_positions=None,
        ignore_invalid_inputs=True, required_batch_size_multiple=1, seed=1,
    ).next_epoch_itr(shuffle=False)
    acc = SimilarityAccumulator(len(model.decoder.layers))
    pad = task.target_dictionary.pad()
    seen = 0
    model.eval()
    with AttentionRecorder(model.decoder) as recorder, torch.no_grad():
        for sample in itr:
            if seen >= max_sentences:
                break
            net = sample["net_input"]
            model(**net)
            selfs, crosses = recorder.pop()
            acc.add_batch(selfs, crosses, net["prev_output_tokens"].ne(pad))
            seen += net["src_tokens"].size(0)
    logger.info(f"recorded attention of {seen} sentences of {subset}")
    return acc


def learn(js: Dict[str, torch.Tensor], theta: float,
          similarity: str = SIMILARITIES[0]) -> Dict[str, List[int]]:
    out = {}
    for name in ("self", "cross"):
        key = f"{name}_{similarity}"
        if key in js:
            out[name] = group_layers(1.0 - js[key], theta)
    return out


def sweep(js: Dict[str, torch.Tensor], thetas: List[float]) -> Dict[str, Dict[str, Dict[str, str]]]:
    """The policy each threshold and similarity kind would give, from the same matrices:
    ``{similarity: {theta: {"self": "1,5", "cross": "2,2,2"}}}``."""
    return {
        similarity: {
            str(theta): {k: format_policy(v) for k, v in learn(js, theta, similarity).items()}
            for theta in thetas
        }
        for similarity in SIMILARITIES
    }


def format_sweep(table: Dict[str, Dict[str, Dict[str, str]]]) -> str:
    lines = ["| similarity | theta | self | cross |", "|---|---:|---|---|"]
    for similarity, by_theta in table.items():
        for theta, policy in by_theta.items():
            lines.append(f"| {similarity} | {theta} | {policy.get('self', '')} | {policy.get('cross', '')} |")
    return "\n".join(lines)


def plot(js: Dict[str, torch.Tensor], path: str, title: str = "") -> None:
    from fairseq_shared.plotting import pyplot

    plt = pyplot()

    kinds = [k for k in KINDS if k in js]
    fig, axes = plt.subplots(1, len(kinds), figsize=(3.6 * len(kinds), 3.6))
    if len(kinds) == 1:
        axes = [axes]
    vmax = max(float(js[k].max()) for k in kinds) or 1.0
    labels = {
        "self_per_head": "self-attention (per head)",
        "self_head_avg": "self-attention (head avg)",
        "cross_per_head": "enc-dec attention (per head)",
        "cross_head_avg": "enc-dec attention (head avg)",
    }
    for ax, k in zip(axes, kinds):
        m = js[k].numpy()
        L = m.shape[0]
        im = ax.imshow(m, cmap="Blues_r", vmin=0, vmax=vmax)
        ax.set_title(labels[k], fontsize=9)
        ax.set_xticks(range(L), [str(i + 1) for i in range(L)])
        ax.set_yticks(range(L), [str(i + 1) for i in range(L)])
        ax.set_xlabel("layer")
        for i in range(L):
            for j in range(L):
                ax.text(j, i, f"{m[i, j]:.2f}", ha="center", va="center", fontsize=7,
                        color="black" if m[i, j] > 0.5 * vmax else "white")
    fig.colorbar(im, ax=list(axes), shrink=0.8, label="JS divergence (log2)")
    if title:
        fig.suptitle(title, fontsize=9)
    kind = os.path.splitext(path)[1][1:] or "png"
    checkpoint_io.atomic_write(path, lambda f: fig.savefig(f, format=kind, dpi=120,
                                                           bbox_inches="tight"))
    plt.close(fig)


def learn_policy(checkpoint: str, out_dir: str, data: Optional[str] = None, subset: str = "valid",
                 theta: float = THETA, similarity: str = SIMILARITIES[0],
                 max_sentences: int = MAX_SENTENCES, max_tokens: int = MAX_TOKENS,
                 sweep_thetas: Optional[List[float]] = None) -> Dict[str, List[int]]:
    checkpoint_io.refuse_overwrite([checkpoint], checkpoint_io.files_in(out_dir, OUTPUTS))
    loaded = open_checkpoint(checkpoint, TOOL, TAKES, data=data)
    cfg = loaded.cfg
    acc = collect(loaded.model, loaded.task, subset, max_sentences, max_tokens)
    js = acc.js()
    policy = learn(js, theta, similarity)
    os.makedirs(out_dir, exist_ok=True)
    record = {
        "checkpoint": os.path.abspath(checkpoint),
        "subset": subset,
        "theta": theta,
        "similarity": similarity,
        "mu": "1 - JS (log base 2); block similarity = mean over distinct pairs",
        "policy": {k: format_policy(v) for k, v in policy.items()},
        "trained_with": {
            "self": getattr(cfg.model, "san_self_policy", None),
            "cross": getattr(cfg.model, "san_cross_policy", None),
        },
        "js": {k: [[round(float(x), 5) for x in row] for row in v] for k, v in js.items()},
    }
    if sweep_thetas:
        record["sweep"] = sweep(js, sweep_thetas)
        write_text(os.path.join(out_dir, "sweep.md"), format_sweep(record["sweep"]) + "\n")
    write_text(os.path.join(out_dir, "policy.json"), json.dumps(record, indent=1))
    flags = []
    if "self" in policy:
        flags += ["--san-self-policy", format_policy(policy["self"])]
    if "cross" in policy:
        flags += ["--san-cross-policy", format_policy(policy["cross"])]
    write_text(os.path.join(out_dir, "policy.txt"), " ".join(flags) + "\n")
    plot(js, os.path.join(out_dir, "similarity.png"),
         title=f"{os.path.basename(os.path.dirname(os.path.abspath(checkpoint)))}: "
         f"policy self {record['policy'].get('self')} cross {record['policy'].get('cross')} "
         f"(theta {theta}, {similarity})")
    logger.info(f"policy: {' '.join(flags)}")
    return policy
