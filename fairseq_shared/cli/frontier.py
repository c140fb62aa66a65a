"""``python -m fairseq_shared.cli.frontier``, the command the docs quote: the harness driver
:mod:`fairseq_shared.experiments.drivers.frontier`."""
from fairseq_shared.experiments.drivers.frontier import main

if __name__ == "__main__":
    raise SystemExit(main())
