"""The kind of model an export handles, as a type: what differs between a translation model
and a language model, each kind's behaviour in one class (as CTranslate2's converter carries a
model spec), so that :mod:`.api`, :mod:`.plain`, :mod:`.ct2` and :mod:`.verify` never ask which
kind they hold.

The kind is decided once, where the checkpoint is opened (``Loaded.kind``, a
:class:`fairseq_shared.checkpoint_io.Kind`); :func:`of` gives its behaviour:

* the dictionaries (``dict.SRC.txt`` and ``dict.TGT.txt``, or a language model's ``dict.txt``);
* the plain configuration (fairseq's ``transformer`` flags, or exactly
  ``TransformerLanguageModelConfig``'s fields) and the legacy ``args`` CTranslate2's
  converter reads;
* fairseq's stock class the plain checkpoint must load as;
* the stack whose positions limit a source (the encoder, or a language model's decoder);
* whether ``--hf`` applies (translation models only), and the verification and its summary
  lines (:mod:`.verify`).
"""

import argparse
import os
from typing import Dict, List, Optional

from fairseq_shared.checkpoint_io import Kind


class ExportKind:
    """The behaviour of one kind of model in the export (the module doc)."""

    kind: Kind
    #: why ``--hf`` does not apply to this kind (None: it does)
    hf_refusal: Optional[str] = None

    @property
    def stock_class(self) -> type:
        """fairseq's own class the plain checkpoint loads as."""
        raise NotImplementedError

    def dictionary_names(self, task) -> List[str]:
        raise NotImplementedError

    def write_dictionaries(self, task, out_dir: str) -> Dict[str, str]:
        """The dictionaries as fairseq-preprocess writes them, into ``out_dir``."""
        raise NotImplementedError

    def plain_config(self, model_cfg, task, plain_cfg: Dict) -> Dict:
        """The model section of the plain checkpoint's configuration; ``plain_cfg`` (the
        rest, plain containers) gets what this kind's stock task needs."""
        raise NotImplementedError

    def legacy_args(self, checkpoint: dict) -> argparse.Namespace:
        """The plain ``checkpoint``'s configuration as one legacy namespace (CTranslate2's
        converter reads attributes of ``checkpoint["args"]``)."""
        raise NotImplementedError

    def source_stack(self, model):
        """The stack of fairseq ``model`` whose positions limit a source."""
        raise NotImplementedError

    def verify(self, loaded, plain_model, dataset, ids, settings: Dict,
               ct2_dirs: Dict[str, str], threads: int, hf_dir: Optional[str]) -> Dict:
        """This kind's checks of the export (:mod:`.verify`)."""
        raise NotImplementedError

    def summary_line(self, key: str, value: Dict) -> str:
        raise NotImplementedError

    # ---- the same for every kind
    def legacy_checkpoint(self, checkpoint: dict) -> dict:
        """The plain ``checkpoint`` with its configuration in ``args`` (fairseq's legacy
        layout, which CTranslate2's converter reads) and no ``cfg``."""
        return {**checkpoint, "args": self.legacy_args(checkpoint), "cfg": None}

    def summary_lines(self, verify_report: Dict) -> List[str]:
        """A line for each check of a ``verify`` report."""
        return [self.summary_line(key, value) for key, value in verify_report.items()
                if isinstance(value, dict) and "ok" in value]

    def check_hf(self, error: type) -> None:
        """Raise ``error`` when ``--hf`` does not apply to this kind."""
        if self.hf_refusal:
            raise error(self.hf_refusal)


class Translation(ExportKind):
    kind = Kind.TRANSLATION

    @property
    def stock_class(self) -> type:
        from fairseq.models.transformer import TransformerModel

        return TransformerModel

    def dictionary_names(self, task) -> List[str]:
        return [f"dict.{task.cfg.source_lang}.txt", f"dict.{task.cfg.target_lang}.txt"]

    def write_dictionaries(self, task, out_dir: str) -> Dict[str, str]:
        paths = {}
        for lang, d in ((task.cfg.source_lang, task.source_dictionary),
                        (task.cfg.target_lang, task.target_dictionary)):
            path = os.path.join(out_dir, f"dict.{lang}.txt")
            d.save(path)
            paths[lang] = path
        return paths

    def plain_config(self, model_cfg, task, plain_cfg: Dict) -> Dict:
        plain_cfg["task"]["source_lang"] = task.cfg.source_lang  # inferred at load time
        plain_cfg["task"]["target_lang"] = task.cfg.target_lang
        return plain_model_args(model_cfg)

    def legacy_args(self, checkpoint: dict) -> argparse.Namespace:
        task = checkpoint["cfg"]["task"]
        return argparse.Namespace(**{
            **checkpoint["cfg"]["model"], "task": task["_name"],
            "source_lang": task["source_lang"], "target_lang": task["target_lang"]})

    def source_stack(self, model):
        return model.encoder

    def verify(self, loaded, plain_model, dataset, ids, settings, ct2_dirs, threads, hf_dir):
        from fairseq_shared.export.verify import verify_translation

        return {"settings": settings,
                **verify_translation(loaded.model, plain_model, loaded.task, dataset, ids,
                                     settings, ct2_dirs, threads, hf_dir)}

    def summary_line(self, key: str, value: Dict) -> str:
        from fairseq_shared.export.verify import summary_line

        return summary_line(key, value)


class LanguageModel(ExportKind):
    kind = Kind.LANGUAGE_MODEL
    hf_refusal = ("--hf: translation models only (a language model has no stock "
                  "encoder-decoder class to go to)")

    @property
    def stock_class(self) -> type:
        from fairseq.models.transformer_lm import TransformerLanguageModel

        return TransformerLanguageModel

    def dictionary_names(self, task) -> List[str]:
        return ["dict.txt"]

    def write_dictionaries(self, task, out_dir: str) -> Dict[str, str]:
        from fairseq_shared.export.lm import write_lm_dictionary

        return write_lm_dictionary(task, out_dir)

    def plain_config(self, model_cfg, task, plain_cfg: Dict) -> Dict:
        from fairseq_shared.export.lm import plain_lm_config

        return plain_lm_config(model_cfg)

    def legacy_args(self, checkpoint: dict) -> argparse.Namespace:
        from fairseq_shared.export.lm import legacy_lm_args

        return legacy_lm_args(checkpoint)

    def source_stack(self, model):
        return model.decoder  # its --tokens-per-sample positions

    def verify(self, loaded, plain_model, dataset, ids, settings, ct2_dirs, threads, hf_dir):
        from fairseq_shared.export.verify import verify_lm

        return verify_lm(loaded.model, plain_model, loaded.task, dataset, ids, ct2_dirs,
                         threads)

    def summary_line(self, key: str, value: Dict) -> str:
        from fairseq_shared.export.verify import lm_summary_line

        return lm_summary_line(key, value)


EXPORTS = {k.kind: k for k in (Translation(), LanguageModel())}


def of(kind: Kind) -> ExportKind:
    """The export's behaviour for ``kind``."""
    return EXPORTS[Kind(kind)]


def plain_model_args(model_args) -> Dict:
    """The shared model's flags as a plain ``transformer``'s: ours dropped, arch renamed."""
    from fairseq_shared.models.config import flag_names
    from fairseq_shared.sharing.flags import STACKS

    ours = set(flag_names())
    plain = {k: v for k, v in vars(model_args).items() if k not in ours}
    plain["arch"] = plain["_name"] = "transformer"
    for stack in STACKS:
        plain[f"{stack}_layers_to_keep"] = None  # already applied to the weights
    return plain

