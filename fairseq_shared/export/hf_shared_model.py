"""``FairseqSharedForConditionalGeneration``: M2M100 (fairseq's pre-LN Transformer) whose tied
layers are stored once and whose layers may share attention (SAN, Xiao et al. 2019).

This file is shipped next to the weights as remote code (``trust_remote_code=True``): it imports
torch and transformers only, never the package. Imported from the package it also registers the
classes with ``AutoConfig`` and ``AutoModelForSeq2SeqLM`` (:func:`register`), so a process that
has the package loads an export without remote code.

* **Sharing.** The configuration carries each stack's layer-to-set map (``layer_sets``) and the
  names, inside a layer, of the parameters that are tied (``tied_names``). A layer's parameter is
  tied to the same-named parameter of the first layer of its set that has it (fairseq-shared's
  rule, ``fairseq_shared.sharing.tying``). The ties are transformers' ``_tied_weights_keys``, a
  ``{target: source}`` map of anchored regexes with escaped dots (``layers\\.3\\.`` never
  matches ``layers.30.``): ``save_pretrained`` stores each tied tensor once and loading ties
  them again. A weights file whose "tied" tensors differ is refused (transformers itself would
  only warn and leave them untied).
* **SAN** (``san``: ``self``, ``cross``, ``encoder`` block sizes, ``cross_reuse``), as in
  ``fairseq_shared/san``: a block's first layer, its leader, computes attention; a follower's
  self-attention applies the leader's post-softmax weights to its own values (and caches its
  values only: a width-1 slice stands for its keys, so the cache's length and beam reordering
  see the layer); a follower's encoder-decoder attention returns the leader's output
  (``output``), or its own output projection of the leader's context (``context``), and caches
  nothing. A SAN model computes attention eagerly (its leaders' weights are needed); at inference
  there is no dropout, so a follower's weights are the leader's.
"""

import hashlib
import json
import os
import re
from typing import Dict, List, Optional

import torch
from huggingface_hub.dataclasses import strict
from torch import nn
from transformers import (AutoConfig, AutoModel, AutoModelForSeq2SeqLM, M2M100Config,
                          M2M100ForConditionalGeneration)
from transformers.cache_utils import EncoderDecoderCache
from transformers.models.m2m_100.modeling_m2m_100 import M2M100Attention

MODEL_TYPE = "fairseq_shared"
SELF, CROSS, CROSS_WEIGHTS = "self", "cross", "cross_weights"
REPORT = "export.json"  # the export's report beside this directory: the files' sha256
#: the Auto classes that load the model (``auto_map`` of ``config.json``, :func:`register`)
AUTO_CLASSES = ("AutoModel", "AutoModelForSeq2SeqLM")


def _sha256(path: str) -> str:
    """The file's sha256 (its own copy: this file ships as remote code, importing no package)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_recorded_hashes(model_dir) -> None:
    """When ``model_dir`` is the ``hf/`` of an export, each of its files whose sha256 the
    export's ``export.json`` (beside it) records must still have it: a ``ValueError`` names
    the first that differs or is missing. A directory outside an export is not checked."""
    if not isinstance(model_dir, (str, os.PathLike)) or not os.path.isdir(model_dir):
        return  # a hub name: nothing recorded here
    model_dir = os.path.abspath(model_dir)
    report_path = os.path.join(os.path.dirname(model_dir), REPORT)
    try:
        with open(report_path) as f:
            hashes = json.load(f).get("sha256")
    except (OSError, ValueError, AttributeError):
        return
    prefix = os.path.basename(model_dir) + "/"
    for name, recorded in sorted((hashes or {}).items()) if isinstance(hashes, dict) else []:
        if not name.startswith(prefix):
            continue
        path = os.path.join(model_dir, name[len(prefix):])
        if not os.path.isfile(path):
            raise ValueError(f"{path}: missing, but {report_path} records it; export again")
        if _sha256(path) != recorded:
            raise ValueError(f"{path}: its sha256 is not the one {report_path} records (the "
                             "file changed after the export wrote it); export again")


def check_config(config) -> None:
    """A ``ValueError`` naming the field of a configuration that does not fit its layers
    (a hand-edited ``config.json``)."""
    layers = {"encoder": config.encoder_layers, "decoder": config.decoder_layers}
    for stack, sets in (config.layer_sets or {}).items():
        if stack not in layers or not isinstance(sets, list) or len(sets) != layers[stack]:
            raise ValueError(f"config.json: layer_sets.{stack} must list the set of each of the "
                             f"{layers.get(stack, 0)} {stack} layers; it is {sets!r}")
    policies = {"self": "decoder", "cross": "decoder", "encoder": "encoder"}
    for key, stack in policies.items():
        policy = (config.san or {}).get(key)
        if policy is not None and (not isinstance(policy, list) or sum(policy) != layers[stack]
                                   or any(not isinstance(p, int) or p < 1 for p in policy)):
            raise ValueError(f"config.json: san.{key} must be block sizes >= 1 summing to the "
                             f"{layers[stack]} {stack} layers; it is {policy!r}")


@strict
class FairseqSharedConfig(M2M100Config):
    """M2M100's configuration with the layer-to-set maps, the tied names and the SAN policy."""

    model_type = MODEL_TYPE
    layer_sets: Optional[dict] = None  # {"encoder": [set of each layer], "decoder": [...]}
    tied_names: Optional[dict] = None  # {"encoder": ["fc1.weight", ...], ...}
    san: Optional[dict] = None  # {"self": [1, 5], "cross": None, "encoder": None, ...}


def blocks(policy: Optional[List[int]]) -> List[List[int]]:
    """Layers of each block with followers, leader first: ``[1, 3] -> [[1, 2, 3]]``."""
    out, start = [], 0
    for size in policy or []:
        if size > 1:
            out.append(list(range(start, start + size)))
        start += size
    return out


def _cache(kwargs):
    """The layer's cache argument (``cache`` since transformers 5.24, ``past_key_values``
    before)."""
    return kwargs.get("cache", kwargs.get("past_key_values"))


class Relay:
    """What a block's leader hands its followers (one per stack; not a module, no state)."""

    def __init__(self):
        self.tensors: Dict[str, torch.Tensor] = {}


class LeaderAttention(M2M100Attention):
    """M2M100's attention that publishes its post-softmax weights (and, encoder-decoder, its
    output or its context) to its followers. A SAN model is eager throughout: the weights are
    needed, and the masks must be eager's (additive, causal mask included)."""

    def __init__(self, source: M2M100Attention, relay: Relay, key: str, publish: Optional[str]):
        super().__init__(source.embed_dim, source.num_heads, source.dropout, source.is_decoder,
                         source.q_proj.bias is not None, source.is_causal, source.config,
                         source.layer_idx)
        # take over the source's projections (their parameters)
        self.q_proj, self.k_proj = source.q_proj, source.k_proj
        self.v_proj, self.out_proj = source.v_proj, source.out_proj
        self.relay, self.key, self.publish = relay, key, publish

    def forward(self, hidden_states, key_value_states=None, **kwargs):
        out_proj, relay = self.out_proj, self.relay
        if self.publish == "context":
            context: List[torch.Tensor] = []
            handle = out_proj.register_forward_pre_hook(lambda m, args: context.append(args[0]))
        try:
            output, weights = super().forward(hidden_states, key_value_states, **kwargs)
        finally:
            if self.publish == "context":
                handle.remove()
        relay.tensors[self.key] = weights
        if self.publish is not None:
            relay.tensors[CROSS] = context[0] if self.publish == "context" else output
        return output, weights


class FollowerSelfAttention(nn.Module):
    """``out_proj(S_leader V)`` with its own ``v_proj``/``out_proj``; no Q/K."""

    def __init__(self, source: M2M100Attention, relay: Relay, release: bool):
        super().__init__()
        self.v_proj, self.out_proj = source.v_proj, source.out_proj
        self.num_heads, self.head_dim = source.num_heads, source.head_dim
        self.layer_idx, self.relay, self.release = source.layer_idx, relay, release

    def forward(self, hidden_states, key_value_states=None, **kwargs):
        batch, length = hidden_states.shape[:2]
        values = self.v_proj(hidden_states).view(batch, length, -1, self.head_dim).transpose(1, 2)
        cache = _cache(kwargs)
        if cache is not None:
            if isinstance(cache, EncoderDecoderCache):
                cache = cache.self_attention_cache
            _, values = cache.update(values[..., :1], values, self.layer_idx)
        tensors = self.relay.tensors
        weights = tensors.pop(SELF) if self.release else tensors[SELF]
        context = torch.matmul(weights.to(values.dtype), values).transpose(1, 2)
        return self.out_proj(context.reshape(batch, length, -1)), None


class CrossFollower(nn.Module):
    """The leader's encoder-decoder attention output, or (``context``) its own output
    projection of the leader's context. No parameters but that projection; no cache."""

    def __init__(self, out_proj: Optional[nn.Linear], relay: Relay, release: bool):
        super().__init__()
        self.out_proj, self.relay, self.release = out_proj, relay, release

    def forward(self, hidden_states, key_value_states=None, **kwargs):
        tensors = self.relay.tensors
        shared = tensors.pop(CROSS) if self.release else tensors[CROSS]
        if self.release:
            tensors.pop(CROSS_WEIGHTS, None)
        return (shared if self.out_proj is None else self.out_proj(shared)), None


def share_self_attention(layers, policy, relay: Relay) -> None:
    for leader, *followers in blocks(policy):
        layers[leader].self_attn = LeaderAttention(layers[leader].self_attn, relay, SELF, None)
        for i in followers:
            layers[i].self_attn = FollowerSelfAttention(layers[i].self_attn, relay,
                                                        release=i == followers[-1])


def share_cross_attention(layers, policy, reuse: str, relay: Relay) -> None:
    for leader, *followers in blocks(policy):
        layers[leader].encoder_attn = LeaderAttention(layers[leader].encoder_attn, relay,
                                                      CROSS_WEIGHTS, reuse)
        for i in followers:
            own = layers[i].encoder_attn.out_proj if reuse == "context" else None
            layers[i].encoder_attn = CrossFollower(own, relay, release=i == followers[-1])
            layers[i].encoder_attn_layer_norm = nn.Identity()  # it fed only the queries


def tie_map(model: nn.Module, layer_sets: dict, tied_names: dict) -> Dict[str, str]:
    """``{target: source}`` parameter names (under ``model.``): each tied name of a layer to the
    same name in the first layer of its set that has it."""
    out = {}
    for stack, sets in (layer_sets or {}).items():
        layers = getattr(model.model, stack).layers
        has = [{n for n, _ in layer.named_parameters()} for layer in layers]
        for i, s in enumerate(sets):
            for name in tied_names.get(stack, []):
                owner = next((j for j in range(i) if sets[j] == s and name in has[j]), None)
                if name in has[i] and owner is not None:
                    out[f"model.{stack}.layers.{i}.{name}"] = f"model.{stack}.layers.{owner}.{name}"
    return out


def anchored(name: str) -> str:
    return re.escape(name) + "$"


class FairseqSharedForConditionalGeneration(M2M100ForConditionalGeneration):
    """M2M100 with tied layers stored once and SAN (the module doc)."""

    config_class = FairseqSharedConfig

    def __init__(self, config: FairseqSharedConfig):
        check_config(config)
        super().__init__(config)
        san = config.san or {}
        reuse = san.get("cross_reuse") or "output"
        decoder_relay = Relay()
        share_self_attention(self.model.decoder.layers, san.get("self"), decoder_relay)
        share_cross_attention(self.model.decoder.layers, san.get("cross"), reuse, decoder_relay)
        share_self_attention(self.model.encoder.layers, san.get("encoder"), Relay())
        ties = tie_map(self, config.layer_sets, config.tied_names or {})
        self._tied_weights_keys = {
            anchored(t): anchored(s)
            for t, s in {**M2M100ForConditionalGeneration._tied_weights_keys, **ties}.items()}
        self.post_init()  # again: the ties of the layers

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """transformers' ``from_pretrained``, after :func:`check_recorded_hashes`."""
        check_recorded_hashes(pretrained_model_name_or_path)
        return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)

    def _check_and_adjust_attn_implementation(self, attn_implementation, *args, **kwargs):
        """Eager attention for a SAN model (its leaders' weights are needed)."""
        if any(blocks(policy) for key, policy in (self.config.san or {}).items()
               if key != "cross_reuse"):
            return "eager"
        return super()._check_and_adjust_attn_implementation(attn_implementation, *args, **kwargs)

    def tie_weights(self, missing_keys=None, recompute_mapping=True):
        """Refuse a weights file whose tied tensors differ (transformers would warn and leave
        them untied), then tie."""
        if missing_keys is not None:
            for target, source in self.all_tied_weights_keys.items():
                if target in missing_keys or source in missing_keys:
                    continue
                a, b = self.get_parameter(target), self.get_parameter(source)
                if a.device.type != "meta" and not torch.equal(a, b):
                    raise ValueError(
                        f"{target} differs from {source} in the weights file, but this model "
                        f"ties them ({self.config.model_type}: tied tensors are stored once)")
        return super().tie_weights(missing_keys=missing_keys, recompute_mapping=recompute_mapping)


FairseqSharedConfig.register_for_auto_class()
FairseqSharedForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")


def auto_map() -> Dict[str, str]:
    """``config.json``'s ``auto_map``: the configuration and every class of
    :data:`AUTO_CLASSES` as this file's (``register_for_auto_class`` records one class)."""
    module = __name__.rsplit(".", 1)[-1]
    return {"AutoConfig": f"{module}.{FairseqSharedConfig.__name__}",
            **{auto: f"{module}.{FairseqSharedForConditionalGeneration.__name__}"
               for auto in AUTO_CLASSES}}


def register() -> None:
    """Let ``AutoConfig`` and :data:`AUTO_CLASSES` find the classes without remote code."""
    AutoConfig.register(MODEL_TYPE, FairseqSharedConfig, exist_ok=True)
    for auto in (AutoModel, AutoModelForSeq2SeqLM):
        auto.register(FairseqSharedConfig, FairseqSharedForConditionalGeneration, exist_ok=True)


if __name__.startswith("fairseq_shared."):
    register()
