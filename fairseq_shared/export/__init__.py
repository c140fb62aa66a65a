"""Deploy a parameter-shared model: a plain fairseq ``transformer`` checkpoint and a
CTranslate2 model, both verified against the shared model on real sentences.

* :mod:`.plain` -- the shared checkpoint as fairseq's own ``transformer`` (tied weights
  expanded, sharing markers dropped, configuration in plain types only).
* :mod:`.ct2` -- CTranslate2 conversion through CTranslate2's own fairseq converter, its
  decoding, and the size of ``model.bin`` against the unique weights.
* :mod:`.verify` -- hypotheses of two decoders on the same sentences, compared.
* :mod:`.api` -- :func:`export`, what ``python -m fairseq_shared.cli.export`` runs.
"""

from fairseq_shared.export.plain import ExportError  # noqa: F401
