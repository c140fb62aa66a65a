"""Checkpoint averaging (fairseq's ``scripts/average_checkpoints.py``, which the pip package
lacks) with safe loading and ties kept: the library behind ``fairseq-shared-average``
(:mod:`fairseq_shared.cli.average_checkpoints`, whose docstring lists the differences from
fairseq's script)."""

import collections
import os
import re
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from fairseq_shared import checkpoint_io

EPOCH_PATTERN = re.compile(r"checkpoint(\d+)\.pt")
UPDATE_PATTERN = re.compile(r"checkpoint_\d+_(\d+)\.pt")


class AverageError(ValueError):
    """Bad input for averaging; the message says what to change."""


def last_n_checkpoints(
    directory: str, n: int, update_based: bool, upper_bound: Optional[int] = None
) -> List[str]:
    """The ``n`` newest epoch (``checkpointE.pt``) or update (``checkpoint_E_U.pt``) files."""
    flag = "--num-update-checkpoints" if update_based else "--num-epoch-checkpoints"
    kind = "update checkpoints (checkpoint_<EPOCH>_<UPDATE>.pt)" if update_based else (
        "epoch checkpoints (checkpoint<EPOCH>.pt)"
    )
    if not os.path.isdir(directory):
        raise AverageError(f"{flag} needs --inputs to be one checkpoint directory; "
                           f"'{directory}' is not a directory")
    pattern = UPDATE_PATTERN if update_based else EPOCH_PATTERN
    entries = []
    for name in os.listdir(directory):
        match = pattern.fullmatch(name)
        if match is not None:
            number = int(match.group(1))
            if upper_bound is None or number <= upper_bound:
                entries.append((number, name))
    entries.sort(reverse=True)
    if len(entries) < n:
        bound = "" if upper_bound is None else f" with number <= {upper_bound} (--checkpoint-upper-bound)"
        found = ", ".join(name for _, name in sorted(entries)) or "none"
        allowed = f"1..{len(entries)}" if entries else "none: there is nothing to average"
        raise AverageError(
            f"{flag} {n}: '{directory}' holds only {len(entries)} {kind}{bound} "
            f"[{found}]; allowed values: {allowed}"
        )
    return [os.path.join(directory, name) for _, name in entries[:n]]


def _tensor_identity(tensor: torch.Tensor) -> Tuple:
    """Keys whose tensors have the same identity are one (tied) tensor."""
    return (
        tensor.untyped_storage().data_ptr(),
        tensor.storage_offset(),
        tuple(tensor.shape),
        tuple(tensor.stride()),
        tensor.dtype,
    )


def tie_groups(model_state: Dict[str, torch.Tensor]) -> List[Tuple[str, ...]]:
    """Keys grouped by shared tensor, in state-dict order; untied keys are 1-tuples."""
    groups: Dict[Tuple, List[str]] = collections.OrderedDict()
    for key, value in model_state.items():
        if not torch.is_tensor(value):
            raise AverageError(f"model entry '{key}' is a {type(value).__name__}, not a tensor")
        groups.setdefault(_tensor_identity(value), []).append(key)
    return [tuple(keys) for keys in groups.values()]


def load_checkpoint(path: str) -> dict:
    """The checkpoint as stored (safe loading; a bad file: :class:`CheckpointError`)."""
    if not os.path.isfile(path) and not os.path.exists(path):
        raise AverageError(f"--inputs: no such checkpoint file '{path}'")
    return checkpoint_io.load_raw(path)


#: Options of a model's architecture that training sets but that do not change the function the
#: weights compute (regularisation, memory): checkpoints that differ only in these average.
TRAINING_ONLY = ("checkpoint_activations", "offload_activations", "min_params_to_wrap")


def model_options(state: dict) -> Dict[str, object]:
    """The options that define a checkpoint's model: the flags of its architecture's
    ``add_args`` (sharing strategy, layers, widths, normalisation ...), without dropout, layer
    drop and :data:`TRAINING_ONLY`, from ``cfg["model"]`` or the legacy ``args`` (two names of
    one model, ``shared_transformer`` with cycle sharing and ``transformer_cycle``, agree);
    ``arch`` alone when the architecture is not registered."""
    import argparse

    from fairseq.models import ARCH_MODEL_REGISTRY

    cfg = state.get("cfg")
    config = cfg.get("model") if isinstance(cfg, dict) else None
    config = config if config is not None else state.get("args")
    values = vars(config) if isinstance(config, argparse.Namespace) else dict(config or {})
    arch = values.get("arch", values.get("_name"))
    if arch not in ARCH_MODEL_REGISTRY:
        return {"arch": arch}
    parser = argparse.ArgumentParser(add_help=False)
    ARCH_MODEL_REGISTRY[arch].add_args(parser)
    names = {a.dest for a in parser._actions}
    keep = {n for n in names if n in values and n not in TRAINING_ONLY
            and "dropout" not in n and "layerdrop" not in n}
    return {n: values[n] for n in sorted(keep)}


def _short(value) -> str:
    text = str(value.tolist() if torch.is_tensor(value) else value)
    return text if len(text) <= 60 else text[:57] + "..."


def refuse_another_model(path: str, state: dict, reference_path: str, reference: dict) -> None:
    """Raise :class:`AverageError` naming both files and what differs when ``state`` is not a
    checkpoint of the model ``reference`` is: an option of :func:`model_options` (a cycle and
    a cycle_rev model have the same tensors), or a tensor that is not floating-point (a layer
    map: averaged, it would be a map of neither)."""
    ours, theirs = model_options(state), model_options(reference)
    for name in theirs:
        if name in ours and ours[name] != theirs[name]:
            flag = "--" + name.replace("_", "-")
            raise AverageError(
                f"'{path}' is another model than '{reference_path}': {flag} {_short(ours[name])} "
                f"against {_short(theirs[name])}; only checkpoints of one model are averaged")
    for key, value in reference["model"].items():
        other = state["model"].get(key)
        if (torch.is_tensor(value) and not value.is_floating_point() and torch.is_tensor(other)
                and not torch.equal(other, value)):
            raise AverageError(
                f"'{path}' is another model than '{reference_path}': its {key} is "
                f"{_short(other)} against {_short(value)}; only checkpoints of one model are "
                "averaged")


def average_checkpoints(inputs: Sequence[str]) -> dict:
    """Average the ``model`` tensors of ``inputs``; everything else comes from ``inputs[0]``."""
    if not inputs:
        raise AverageError("--inputs: no checkpoints to average")
    new_state = None
    sums: Dict[str, torch.Tensor] = {}  # representative key of each tie group -> sum
    dtypes: Dict[str, torch.dtype] = {}
    reference_groups = None
    reference_keys = None
    for path in inputs:
        state = load_checkpoint(path)
        model = state["model"]
        keys = list(model.keys())
        groups = tie_groups(model)
        if reference_keys is None:
            new_state, reference_keys, reference_groups = state, keys, groups
        else:
            refuse_another_model(path, state, inputs[0], new_state)
            if set(keys) != set(reference_keys):
                missing = sorted(set(reference_keys) - set(keys))
                extra = sorted(set(keys) - set(reference_keys))
                raise AverageError(
                    f"'{path}' does not hold the parameters of '{inputs[0]}': "
                    f"missing {missing[:5]}{'...' if len(missing) > 5 else ''}, "
                    f"extra {extra[:5]}{'...' if len(extra) > 5 else ''}"
                )
            if sorted(groups) != sorted(reference_groups):
                raise AverageError(
                    f"'{path}' ties parameters differently from '{inputs[0]}': "
                    f"{sorted(set(groups) ^ set(reference_groups))[:5]}"
                )
        for group in groups:
            tensor = model[group[0]]
            if group[0] not in sums:
                dtypes[group[0]] = tensor.dtype
                accumulate = torch.float64 if tensor.is_floating_point() else torch.int64
                sums[group[0]] = tensor.to(accumulate, copy=True)
            else:
                if tensor.shape != sums[group[0]].shape:
                    raise AverageError(
                        f"'{group[0]}' has shape {tuple(tensor.shape)} in '{path}' but "
                        f"{tuple(sums[group[0]].shape)} in '{inputs[0]}'"
                    )
                sums[group[0]] += tensor.to(sums[group[0]].dtype)

    n = len(inputs)
    averaged = collections.OrderedDict()
    shared = {}
    for group in reference_groups:
        total = sums[group[0]]
        dtype = dtypes[group[0]]
        if total.is_floating_point():
            out_dtype = torch.float32 if dtype == torch.float16 else dtype
            value = (total / n).to(out_dtype)
        else:
            value = torch.div(total, n, rounding_mode="floor").to(dtype)
        for key in group:
            shared[key] = value  # one tensor for the whole tie group
    for key in reference_keys:  # the first checkpoint's key order
        averaged[key] = shared[key]
    new_state["model"] = averaged
    return new_state
