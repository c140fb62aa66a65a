"""Checkpoints of small models built in-process (no training), for the conversion and
learning commands' tests."""

import torch
from fairseq.tasks.translation import TranslationTask

from helpers_model import TINY, parse_args


def build_for_data(data, arch, flags=(), seed=1):
    """``(args, task, model)`` of a TINY model over the dictionaries of ``data``."""
    args = parse_args(arch, TINY + list(flags))
    args.data = str(data)
    task = TranslationTask.setup_task(args)
    torch.manual_seed(seed)
    return args, task, task.build_model(args)


def save_checkpoint(path, args, model):
    """A fairseq checkpoint in the legacy layout (``args``), as fairseq 0.12 reads it."""
    history = [{"criterion_name": "CrossEntropyCriterion", "optimizer_name": "Adam",
                "lr_scheduler_state": {}, "num_updates": 0}]
    torch.save({"args": args, "cfg": None, "model": model.state_dict(),
                "optimizer_history": history, "extra_state": {}}, path)
    return path
