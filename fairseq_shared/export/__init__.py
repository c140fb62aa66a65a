"""Deploy a parameter-shared model: a plain fairseq ``transformer`` checkpoint, a
CTranslate2 model and a Hugging Face transformers model, each verified on real sentences.

* :mod:`.plain` -- the shared checkpoint as fairseq's own ``transformer`` (tied weights
  expanded, sharing markers dropped, configuration in plain types only).
* :mod:`.ct2` -- CTranslate2 conversion through CTranslate2's own fairseq converter, its
  decoding, and the size of ``model.bin`` against the unique weights.
* :mod:`.hf`, :mod:`.hf_tokenizer`, :mod:`.hf_generation` -- ``--hf``: the stock class,
  the tokenizer, fairseq's beam settings (transformers is imported only there).
* :mod:`.lm` -- a language model's plain ``transformer_lm`` configuration and dictionary.
* :mod:`.verify` -- the check, for the kind of model the opened checkpoint carries
  (``Loaded.kind``, :class:`fairseq_shared.checkpoint_io.Kind`, decided once on opening): a
  translation model's hypotheses of both engines scored by both (models agree within a stated
  tolerance, search differences reported), a language model's teacher-forced log-probs.
* :mod:`.outputs` -- what the export writes; the refusal to write over its inputs.
* :mod:`.api` -- :func:`export`, what ``python -m fairseq_shared.cli.export`` runs.
"""

from fairseq_shared.export.plain import ExportError  # noqa: F401
