"""Build a model from fairseq-train's flags, untrained, and count its unique parameters: the
one helper behind ``python -m fairseq_shared.cli.count_params`` and the harness's parameter
counts (:func:`harness.runs.count_params`).

The model is built for real, as fairseq-train builds it (its parser, the task's
``build_model``), on one thread; each tied tensor counts once, as fairseq-train logs
(:func:`~fairseq_shared.sharing.tying.unique_parameter_count`).
"""

from typing import Optional, Sequence

from fairseq_shared.sharing.tying import unique_parameter_count


def build(train_flags: Sequence[str], dictionary=None):
    """The model of ``fairseq-train TRAIN_FLAGS`` (its arguments: the data directory first,
    then ``--arch`` ...). ``dictionary``: build with this joint source/target dictionary (a
    language model's: its dictionary) instead of the ones the task reads from the data
    directory, which is then never read."""
    import torch
    from fairseq import options, tasks

    import fairseq_shared  # noqa: F401  (registers the models)

    args = options.parse_args_and_arch(options.get_training_parser(), list(train_flags))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        if dictionary is None:
            task = tasks.setup_task(args)
        else:
            task = tasks.TASK_REGISTRY[args.task](args, dictionary, dictionary)
        return task.build_model(args)
    finally:
        torch.set_num_threads(threads)


def count_params(train_flags: Sequence[str], dictionary: Optional[object] = None) -> int:
    """Unique parameters of :func:`build`'s model."""
    return unique_parameter_count(build(train_flags, dictionary))
