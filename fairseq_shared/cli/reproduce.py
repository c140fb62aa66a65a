"""``python -m fairseq_shared.cli.reproduce``, the command the docs quote: the harness driver
:mod:`fairseq_shared.experiments.drivers.reproduce`."""
from fairseq_shared.experiments.drivers.reproduce import main

if __name__ == "__main__":
    raise SystemExit(main())
