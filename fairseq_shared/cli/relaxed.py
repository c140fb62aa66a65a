"""``python -m fairseq_shared.cli.relaxed``, the command the docs quote: the harness driver
:mod:`fairseq_shared.experiments.drivers.relaxed`."""
from fairseq_shared.experiments.drivers.relaxed import main

if __name__ == "__main__":
    raise SystemExit(main())
