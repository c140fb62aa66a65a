"""``python -m fairseq_shared.cli.evidence``, the command the docs quote: the harness driver
:mod:`fairseq_shared.experiments.drivers.evidence`."""
from fairseq_shared.experiments.drivers.evidence import main

if __name__ == "__main__":
    raise SystemExit(main())
