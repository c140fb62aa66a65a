"""fairseq's Transformer with cross-layer parameter sharing (Takase & Kiyono 2021; ALBERT).

The model is fairseq's own ``TransformerModel`` (flags and their validation:
:mod:`fairseq_shared.models.config`); after it is built, the layers of each
stack are tied according to a layer-to-set map (:mod:`fairseq_shared.sharing`:
:class:`~fairseq_shared.sharing.stacks.SharedStacksMixin`: tied tensors are stored once
in ``state_dict()``, with the map they were saved under, and re-expanded on
``load_state_dict()``). Attention-weight sharing (SAN) comes from the encoder and decoder
classes of :mod:`fairseq_shared.san`.
"""

import logging

from fairseq.models import register_model
from fairseq.models.transformer import TransformerConfig, TransformerModel

from fairseq_shared.models.config import add_args, check_task, model_config
from fairseq_shared.san import SANTransformerDecoder, SANTransformerEncoder
from fairseq_shared.sharing.stacks import SharedStacksMixin

logger = logging.getLogger(__name__)


@register_model("shared_transformer")
class SharedTransformerModel(SharedStacksMixin, TransformerModel):
    """Transformer whose layers share parameters across depth (see README)."""

    def __init__(self, args, encoder, decoder):
        super().__init__(args, encoder, decoder)
        self.tied_aliases = {}
        self.sharing = {}

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        add_args(parser)  # sharing and SAN flags (fairseq_shared/models/config.py)

    @classmethod
    def build_model(cls, args, task):
        from fairseq_shared.models.architectures import shared_base_architecture

        shared_base_architecture(args)
        check_task("translation model", task)
        config = model_config(args)  # fail on bad flags before building anything
        plan, san = config.sharing, config.san
        model = super().build_model(args, task)  # fairseq shrinks pruned stacks here
        model.configure_san(san)  # before tying: followers drop unused modules first
        model.apply_sharing(plan)
        for stack, sharing in plan.items():
            if sharing.kept is not None:  # fairseq set --{stack}-layers to the kept count;
                # record the kept map too, so that a saved pruned model rebuilds as it was
                for name, value in sharing.pruned_args().items():
                    setattr(args, name, value)
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
