"""A shared language model's export: the plain ``transformer_lm`` pieces (its check is
:mod:`.verify`'s, :func:`~fairseq_shared.export.verify.verify_lm`).

* :func:`plain_lm_config` -- the model configuration of fairseq's own ``transformer_lm``:
  exactly the fields of ``TransformerLanguageModelConfig`` (stock fairseq merges the stored
  configuration into that dataclass strictly, so every flag of this package must go,
  whatever flags are added later), resolved to plain values.
* :func:`legacy_lm_args` -- the ``argparse.Namespace`` CTranslate2's converter reads (its
  fairseq converter takes ``transformer_lm``; it sets the task up from the same namespace).
* :func:`write_lm_dictionary` -- ``dict.txt``.
"""

import argparse
import dataclasses
import os
from typing import Dict

PLAIN_MODEL = "transformer_lm"


def plain_lm_config(model_cfg) -> Dict:
    """The shared language model's configuration as stock ``transformer_lm``'s, plain types."""
    from fairseq.models.transformer_lm import TransformerLanguageModelConfig
    from omegaconf import OmegaConf

    if OmegaConf.is_config(model_cfg):
        values = OmegaConf.to_container(model_cfg, resolve=True, enum_to_str=True)
    else:
        values = dict(vars(model_cfg))
    stock = {f.name for f in dataclasses.fields(TransformerLanguageModelConfig)}
    plain = {k: v for k, v in values.items() if k in stock}
    plain["_name"] = PLAIN_MODEL
    plain["decoder_layers_to_keep"] = None  # already applied to the weights
    return plain


def legacy_lm_args(checkpoint: dict) -> argparse.Namespace:
    """The plain checkpoint's task and model configuration as one legacy namespace."""
    task, model = checkpoint["cfg"]["task"], checkpoint["cfg"]["model"]
    return argparse.Namespace(**{**task, **model, "task": task["_name"], "arch": PLAIN_MODEL})


def write_lm_dictionary(task, out_dir: str) -> Dict[str, str]:
    """``dict.txt``, which ``--task language_modeling`` reads (fairseq-preprocess
    ``--only-source`` writes it)."""
    path = os.path.join(out_dir, "dict.txt")
    task.source_dictionary.save(path)
    return {"dict": path}
