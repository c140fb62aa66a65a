"""The harness drivers: the argparse mains of the experiment suites. Each runs as
``python -m fairseq_shared.cli.<driver>`` (budget, frontier, main_job), through its alias in
:mod:`fairseq_shared.cli`, the form the docs quote."""
