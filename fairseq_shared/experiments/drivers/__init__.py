"""The harness drivers: the argparse mains of the experiment suites. Each runs as
``python -m fairseq_shared.cli.<driver>`` (budget, evidence, frontier, lm_evidence, main_job,
relaxed, reproduce), through its alias in :mod:`fairseq_shared.cli`, the form the docs quote."""
