"""fairseq's Transformer with cross-layer parameter sharing (Takase & Kiyono 2021; ALBERT).

The model is fairseq's own ``TransformerModel``; after it is built, the layers of each
stack are tied according to a :class:`~fairseq_shared.sharing` assignment. Tied tensors are
stored once in ``state_dict()`` and re-expanded on ``load_state_dict()``.
"""

import logging
from dataclasses import dataclass
from typing import Dict, List, Optional

import torch
from fairseq.models import register_model
from fairseq.models.transformer import TransformerConfig, TransformerModel

from fairseq_shared.san import (
    SANTransformerDecoder,
    SANTransformerEncoder,
    add_san_args,
    san_config_from_args,
)
from fairseq_shared.modules.tying import tie_layers, unique_parameter_count
from fairseq_shared.sharing import (
    SCOPES,
    format_assignment,
    layer_assignment,
    validate_scope,
)

logger = logging.getLogger(__name__)

STACKS = ("encoder", "decoder")


@dataclass(frozen=True)
class StackSharing:
    """How one stack (encoder or decoder) shares parameters."""

    stack: str
    assignment: List[int]  # 0-based set index per layer
    scope: str

    @classmethod
    def from_args(cls, args, stack: str) -> "StackSharing":
        num_layers = getattr(args, f"{stack}_layers")
        assignment = layer_assignment(
            getattr(args, f"{stack}_share_strategy", "none") or "none",
            num_layers,
            getattr(args, f"{stack}_unique_layers", None),
            stack=stack,
        )
        scope = validate_scope(getattr(args, f"{stack}_share_scope", "all") or "all", stack)
        return cls(stack=stack, assignment=assignment, scope=scope)

    @property
    def num_sets(self) -> int:
        return max(self.assignment) + 1

    @property
    def is_shared(self) -> bool:
        return self.num_sets < len(self.assignment)


def add_sharing_args(parser) -> None:
    for stack in STACKS:
        parser.add_argument(
            f"--{stack}-share-strategy",
            type=str,
            metavar="STRATEGY",
            help=f"how {stack} layers map to parameter sets: none, sequence, cycle, cycle_rev, "
            "universal, or an explicit 1-based pattern such as 1,2,3,3,2,1",
        )
        parser.add_argument(
            f"--{stack}-unique-layers",
            type=int,
            metavar="M",
            help=f"number of distinct parameter sets M in the {stack} (1 <= M <= "
            f"--{stack}-layers); needed by sequence, cycle and cycle_rev",
        )
        parser.add_argument(
            f"--{stack}-share-scope",
            type=str,
            metavar="SCOPE",
            help=f"what sharing ties in the {stack}: all (attention, FFN and LayerNorms), "
            "attn (Q/K/V/output projections only; each layer keeps its own FFN), or ffn "
            f"(FFN only). Allowed: {', '.join(SCOPES)}",
        )


def sharing_plan(args) -> Dict[str, StackSharing]:
    """Validate the sharing flags of ``args`` and return the plan for both stacks."""
    return {stack: StackSharing.from_args(args, stack) for stack in STACKS}


@register_model("shared_transformer")
class SharedTransformerModel(TransformerModel):
    """Transformer whose layers share parameters across depth (see README)."""

    def __init__(self, args, encoder, decoder):
        super().__init__(args, encoder, decoder)
        self.tied_aliases: Dict[str, str] = {}
        self.sharing: Dict[str, StackSharing] = {}

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        add_sharing_args(parser)
        add_san_args(parser)  # attention-weight sharing (fairseq_shared/san/)

    @classmethod
    def build_model(cls, args, task):
        from fairseq_shared.models.architectures import shared_base_architecture

        shared_base_architecture(args)
        plan = sharing_plan(args)  # fail on bad flags before building anything
        san = san_config_from_args(args)  # likewise for the SAN policies
        model = super().build_model(args, task)
        model.configure_san(san)  # before tying: followers drop unused modules first
        model.apply_sharing(plan)
        return model

    # ---- attention-weight sharing (SAN) ---------------------------------------------
    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return SANTransformerEncoder(TransformerConfig.from_namespace(args), src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(args)
        return SANTransformerDecoder(
            cfg, tgt_dict, embed_tokens, no_encoder_attn=cfg.no_cross_attention
        )

    def configure_san(self, san) -> None:
        self.san = san
        self.encoder.configure_san(san.encoder_policy)
        self.decoder.configure_san(san.self_policy, san.cross_policy, san.cross_reuse)
        if san.active:
            logger.info(f"SAN: {self.decoder.describe_san()}")

    def apply_sharing(self, plan: Dict[str, StackSharing]) -> None:
        for stack, sharing in plan.items():
            layers = getattr(self, stack).layers
            aliases = tie_layers(layers, sharing.assignment, sharing.scope)
            self.tied_aliases.update(
                {f"{stack}.layers.{a}": f"{stack}.layers.{o}" for a, o in aliases.items()}
            )
            self.sharing[stack] = sharing
            logger.info(
                f"{stack}: {len(sharing.assignment)} layers over {sharing.num_sets} parameter "
                f"sets, scope={sharing.scope}, layer->set: {format_assignment(sharing.assignment)}"
            )
        logger.info(f"unique parameters: {unique_parameter_count(self):,}")

    # ---- checkpoints: store each tied tensor once ------------------------------------
    def state_dict(self, *args, destination=None, prefix="", keep_vars=False):
        state = super().state_dict(
            *args, destination=destination, prefix=prefix, keep_vars=keep_vars
        )
        for alias in self.tied_aliases:
            state.pop(prefix + alias, None)
        return state

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        state_dict = expand_tied_state(state_dict, self.tied_aliases)
        return super().load_state_dict(state_dict, strict=strict, model_cfg=model_cfg, args=args)


def expand_tied_state(state_dict, aliases: Dict[str, str]):
    """Add alias keys that point at their owner's tensor, so strict loading finds them.

    A state dict that already holds an alias with a value different from its owner's
    (for example an averaged checkpoint of a differently tied model) is refused: loading
    it would silently keep only one of the two values.
    """
    expanded = dict(state_dict)
    for alias, owner in aliases.items():
        if owner not in expanded:
            continue
        if alias in expanded and not torch.equal(expanded[alias], expanded[owner]):
            raise ValueError(
                f"checkpoint holds different values for tied parameters '{alias}' and "
                f"'{owner}'; it was not written by a model with this sharing configuration"
            )
        expanded[alias] = expanded[owner]
    return expanded
