"""fairseq's decoder-only language model with cross-layer parameter sharing.

The model is fairseq's own ``TransformerLanguageModel`` (``--task language_modeling``); once
it is built, the decoder's layers are tied by
:class:`~fairseq_shared.sharing.stacks.SharedStacksMixin`, exactly as in the translation
model: the same strategies and scopes (``--decoder-share-strategy``,
``--decoder-unique-layers``, ``--decoder-share-scope``, validated by the model's one entry,
:func:`~fairseq_shared.models.config.model_config`), tied tensors stored once with the map
they were saved under, loading across sharing configurations, LayerDrop pruning. The flags
reach the model through fairseq's dataclass (:mod:`fairseq_shared.models.lm_config`); the
registered architectures are in :mod:`fairseq_shared.models.lm_architectures`.
"""

from fairseq.models import register_model
from fairseq.models.transformer_lm import TransformerLanguageModel

from fairseq_shared.models.config import check_task, model_config
from fairseq_shared.models.lm_config import STACK, SharedTransformerLanguageModelConfig
from fairseq_shared.sharing.stacks import SharedStacksMixin

MODEL = "shared_transformer_lm"


@register_model(MODEL, dataclass=SharedTransformerLanguageModelConfig)
class SharedTransformerLanguageModel(SharedStacksMixin, TransformerLanguageModel):
    """Transformer language model whose decoder layers share parameters across depth."""

    def __init__(self, decoder):
        super().__init__(decoder)
        self.tied_aliases = {}
        self.sharing = {}

    @classmethod
    def build_model(cls, args, task):
        check_task("language model", task)
        plan = model_config(args, stacks=(STACK,), san=False).sharing  # bad flags fail first
        model = super().build_model(args, task)  # fairseq shrinks a pruned decoder here
        model.apply_sharing(plan)
        sharing = plan[STACK]
        if sharing.kept is not None:  # record the kept map, so a saved pruned model rebuilds
            for name, value in sharing.pruned_args().items():
                setattr(args, name, value)
        return model
