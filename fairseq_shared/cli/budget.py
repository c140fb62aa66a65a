"""``python -m fairseq_shared.cli.budget``, the command the docs quote: the harness driver
:mod:`fairseq_shared.experiments.drivers.budget`."""
from fairseq_shared.experiments.drivers.budget import main

if __name__ == "__main__":
    raise SystemExit(main())
