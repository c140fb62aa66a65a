"""``python -m fairseq_shared.cli.main_job``, the command the docs quote: the harness driver
:mod:`fairseq_shared.experiments.drivers.main_job`."""
from fairseq_shared.experiments.drivers.main_job import main

if __name__ == "__main__":
    raise SystemExit(main())
