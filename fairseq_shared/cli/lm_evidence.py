"""``python -m fairseq_shared.cli.lm_evidence``, the command the docs quote: the harness driver
:mod:`fairseq_shared.experiments.drivers.lm_evidence`."""
from fairseq_shared.experiments.drivers.lm_evidence import main

if __name__ == "__main__":
    raise SystemExit(main())
