"""Opening a checkpoint for a tool and writing the one it rebuilt: the one helper that every
checkpoint tool of :mod:`fairseq_shared.tools` and the export (:mod:`fairseq_shared.export`)
go through.

* :func:`open_checkpoint` reads the file with :func:`fairseq_shared.checkpoint_io.load` (a
  message for every bad file and for the wrong kind of model), refuses what the tool cannot
  take (:func:`refuse`, from the tool's :class:`Takes`), sets the task up (``--data`` for
  dictionaries that moved) and builds the model with the checkpoint's weights, strictly.
* :func:`with_config` is the one rule for the configuration of a checkpoint a tool rebuilt
  (:func:`rebuilt_config`); :func:`rebuilt` is a rebuilt checkpoint's whole state (the new
  weights, that configuration, no optimizer state or EMA copy of the old parameters), which
  :func:`fairseq_shared.checkpoint_io.save` writes.
"""

from dataclasses import dataclass
from typing import Optional, Tuple

from fairseq_shared import checkpoint_io
from fairseq_shared.checkpoint_io import CheckpointError
from fairseq_shared.san.flags import san_config_from_args
from fairseq_shared.san.policy import FLAGS


@dataclass
class Loaded:
    """A checkpoint a tool opened: the file's state, its configuration, the task, the model
    (in eval mode, the checkpoint's weights loaded), and its kind (translation or language
    model, decided once from the task by :meth:`~fairseq_shared.checkpoint_io.Kind.of`; None:
    another task's)."""

    path: str
    state: dict
    cfg: object
    task: object
    model: object
    kind: Optional[checkpoint_io.Kind] = None


@dataclass(frozen=True)
class Takes:
    """What a tool takes: ``models``, the registered fairseq models (each with its
    architectures); ``san``: None when SAN models are fine, else why the tool cannot take
    one. ``verb`` names the tool's work in its messages; ``error`` is the tool's error."""

    verb: str
    models: Tuple[str, ...]
    san: Optional[str] = None
    error: type = CheckpointError


def model_of(model_cfg) -> Tuple[Optional[str], Optional[str]]:
    """``(arch, registered model)`` of a checkpoint's model configuration."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY

    arch = getattr(model_cfg, "arch", None) or getattr(model_cfg, "_name", None)
    return arch, ARCH_MODEL_NAME_REGISTRY.get(arch)


def uses_san(model_cfg) -> bool:
    """Whether the model configuration gives a SAN policy (a model without SAN flags: no)."""
    if not any(getattr(model_cfg, f"san_{kind}_policy", None) for kind in FLAGS):
        return False
    return san_config_from_args(model_cfg).active


def refuse(model_cfg, takes: Takes) -> None:
    """Raise ``takes.error`` for a model the tool does not take, naming what it takes (the
    message names the model, not the file: the export records it with a model's results)."""
    arch, model = model_of(model_cfg)
    if model not in takes.models:
        raise takes.error(
            f"cannot {takes.verb} --arch {arch} (model {model}); allowed: checkpoints of the "
            f"{' or '.join(takes.models)} model (and its architectures)"
        )
    if takes.san is not None and uses_san(model_cfg):
        raise takes.error(f"cannot {takes.verb} a SAN model "
                          f"({san_config_from_args(model_cfg).flags()}): {takes.san}")


def open_checkpoint(path: str, tool: str, takes: Takes, expect: Optional[str] = "translation",
                    data: Optional[str] = None) -> Loaded:
    """The checkpoint ``path`` opened for ``tool`` (``expect``: the kind of model it needs,
    None: any; ``data`` overrides the data directory)."""
    state = checkpoint_io.load(path, expect=expect, data=data, tool=tool)
    cfg = state["cfg"]
    refuse(cfg.model, takes)
    task = checkpoint_io.setup_task(cfg.task, path, data)
    model = task.build_model(cfg.model)
    model.load_state_dict(state["model"], strict=True, model_cfg=cfg.model)
    return Loaded(path, state, cfg, task, model.eval(), checkpoint_io.Kind.of(state))


# ---------------------------------------------------------------------------- writing
def rebuilt_config(cfg, model) -> dict:
    """The configuration of a checkpoint a tool rebuilt, as fairseq's trainer saves one:
    every section of ``cfg`` but ``model`` as plain containers (interpolations resolved,
    enums as strings), and ``model`` the rebuilt model's (an ``argparse.Namespace`` for a
    fairseq-shared model, a dict for a plain one). Store it with ``state["args"] = None``
    (:func:`with_config`): fairseq prefers legacy ``args`` to ``cfg``."""
    from omegaconf import OmegaConf

    plain = {
        key: OmegaConf.to_container(cfg[key], resolve=True, enum_to_str=True)
        if OmegaConf.is_config(cfg[key]) else cfg[key]
        for key in cfg if key != "model"
    }
    plain["model"] = model
    return plain


def with_config(state: dict, cfg, model) -> dict:
    """``state`` with :func:`rebuilt_config` as its configuration and no legacy ``args``."""
    state["cfg"] = rebuilt_config(cfg, model)
    state["args"] = None
    return state


def rebuilt(loaded: Loaded, model, model_cfg, extra: Optional[dict] = None) -> dict:
    """The state of the checkpoint a tool rebuilt from ``loaded``: ``model``'s weights, its
    configuration ``model_cfg`` by :func:`with_config`, and no optimizer state or EMA copy
    (both belong to the old parameters: fine-tune with ``--reset-optimizer``); ``extra`` is
    added to its ``extra_state``. Everything else (the optimizer history, the training
    counters) stays as it was."""
    state = loaded.state
    state["model"] = model.state_dict()
    with_config(state, loaded.cfg, model_cfg)
    state["last_optimizer_state"] = None
    kept = {k: v for k, v in (state.get("extra_state") or {}).items() if k != "ema"}
    state["extra_state"] = {**kept, **(extra or {})}
    return state
