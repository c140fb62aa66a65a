"""Convert a trained model into one that shares parameters across layers (the library side of
``python -m fairseq_shared.cli.convert_sharing``).

The input is a fairseq ``transformer`` checkpoint or a fairseq-shared ``shared_transformer``
one (any map: it is first expanded to per-position weights with the model's
``full_state_dict()``). The output model is ``shared_transformer`` with the new sharing
flags. A stack whose ``--{stack}-share-strategy`` is given takes all its sharing flags from the
command line (unset: M none, scope ``all``, no relaxation); another stack keeps the input's
(a vanilla input has none: no sharing) except for the flags given. The arch becomes
``shared_transformer``: a family name such as ``transformer_cycle_rev`` would misdescribe a
model converted to another map, and every size flag is already explicit in the saved
configuration.

Each parameter the new model ties across positions becomes the mean of those positions'
weights; every other parameter (including LayerNorms and biases that
``--{stack}-untie-norms/-biases`` keep per position) keeps its position's weight. With
``--{stack}-share-lora-rank R`` each position's delta ``B A`` on a tied Linear weight starts
as the best rank-R approximation of its residual ``W_pos - W_set``, from the truncated SVD
(:func:`lora_factors`, below); at R = d with untied norms and biases the converted model
computes what the input did, up to float rounding. The values are written through the built
target model (its own state dict and ``load_state_dict``, so the checkpoint is one that
model wrote). The report gives, per stack
and position, the relative Frobenius residual ``||W_pos - W'_pos|| / ||W_pos||`` over the
parameters the scope ties, against the set mean (``before``) and against what the converted
model computes with at that position (``after``).

The optimizer state no longer matches the parameters: it is removed (fine-tune with
``--finetune-from-model OUT.pt`` or ``--restore-file OUT.pt --reset-optimizer ...``), and so
is an EMA copy of the old weights (:func:`fairseq_shared.tools.checkpoints.rebuilt`). SAN
models are refused: a follower has no Q/K (or no encoder-decoder projections) of its own, so
there is no per-position weight to average.

The arithmetic (pure functions on tensors, at the end of the module):

- :func:`set_means`: a set's shared weight is the mean of its positions' weights, the
  least-squares choice: it minimises ``sum_pos ||W_pos - W_set||_F^2``.
- :func:`lora_factors`: a position's low-rank delta ``B A`` (B: out x R, A: R x in) for the
  residual ``W_pos - W_set``, from its truncated SVD ``U_R S_R V_R^T``, split evenly:
  ``B = U_R S_R^(1/2)``, ``A = S_R^(1/2) V_R^T``. ``B A`` is the best rank-R approximation of
  the residual (Eckart-Young), exact at R = min(out, in). The even split makes the factors
  balanced (``B^T B = A A^T = S_R``): neither is near zero, so gradients reach both
  (d/dB = G A^T, d/dA = B^T G), and gradient flow keeps ``B^T B - A A^T`` constant, so the
  balance holds while fine-tuning; PiSSA (Meng et al. 2024) initialises LoRA the same way.
  A LoRA whose delta is ``scale * B A`` gets both factors divided by ``sqrt(scale)``.
- :func:`relative_residual`: how far positions are from what replaces them,
  ``||W_pos - W_approx||_F / ||W_pos||_F`` over a group of tensors.
"""

import copy
import logging
import os
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import torch

from fairseq_shared import checkpoint_io
from fairseq_shared.models.architectures import MODEL
from fairseq_shared.models.config import model_config
from fairseq_shared.sharing.assignment import format_assignment, in_scope
from fairseq_shared.sharing.flags import STACK_DEFAULTS, STACKS
from fairseq_shared.sharing.lora import DELTA_A, DELTA_B, ORIGINAL, is_delta, logical_name
from fairseq_shared.tools.checkpoints import Takes, open_checkpoint, rebuilt

logger = logging.getLogger("fairseq_shared.convert_sharing")

#: Per-stack model attributes a conversion may set (``{stack}_{name}``).
SHARING_ATTRS = ("share_strategy", "unique_layers", "share_scope", "share_lora_rank",
                 "untie_norms", "untie_biases")
TARGET_ARCH = MODEL
TOOL = "convert_sharing"


def change_names() -> List[str]:
    """The settings a conversion takes: ``encoder_share_strategy``, ..."""
    return [f"{s}_{a}" for s in STACKS for a in SHARING_ATTRS]


class ConversionError(ValueError):
    """The checkpoint or the flags cannot be converted; the message says why."""


TAKES = Takes("convert", ("transformer", MODEL), san=(
    "its follower layers have no attention projections of their own to average. Allowed: a "
    "model without SAN; convert the policy to all-1 blocks first (python -m "
    "fairseq_shared.cli.convert_policy IN.pt PLAIN.pt --san-self-policy 1,1,... "
    "--san-cross-policy 1,1,...), which gives followers their leader's weights"),
    error=ConversionError)


# ---------------------------------------------------------------------------- flags
def target_args(model_args, changes: Dict[str, object]):
    """The input's model flags with ``changes`` (``{"decoder_share_strategy": "1,1,2", ...}``;
    None: keep) applied, arch ``shared_transformer``; validated by the model's own checks."""
    unknown = sorted(set(changes) - set(change_names()))
    if unknown:
        raise ConversionError(f"unknown sharing settings {unknown}")
    args = copy.deepcopy(model_args)
    args.arch = args._name = TARGET_ARCH
    for stack in STACKS:
        fresh = changes.get(f"{stack}_share_strategy") is not None  # a new map: M, scope and
        for attr in SHARING_ATTRS:  # and relaxation start from their defaults too
            if fresh or getattr(args, f"{stack}_{attr}", None) is None:
                setattr(args, f"{stack}_{attr}", STACK_DEFAULTS[attr])
    for name, value in changes.items():
        if value is not None:
            setattr(args, name, value)
    model_config(args)  # SharingConfigError naming the flag and the allowed values
    return args


# ---------------------------------------------------------------------------- checkpoint
def _full_state(model) -> Dict[str, torch.Tensor]:
    full = getattr(model, "full_state_dict", None)  # merges tied sets (and LoRA deltas)
    return dict(full() if full is not None else model.state_dict())


def _layer_state(state: Dict[str, torch.Tensor], stack: str, num_layers: int):
    prefix = f"{stack}.layers."
    layers: List[Dict[str, torch.Tensor]] = [{} for _ in range(num_layers)]
    for key, value in state.items():
        if not key.startswith(prefix):
            continue
        index, _, name = key[len(prefix):].partition(".")
        if index.isdigit() and name:
            layers[int(index)][name] = value
    return layers


def _tied_groups(model) -> Dict[str, List[str]]:
    """Each parameter name of ``model`` -> every name bound to the same tensor."""
    by_tensor: Dict[int, List[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        by_tensor.setdefault(id(param), []).append(name)
    return {name: names for names in by_tensor.values() for name in names}


def _is_marker(key: str) -> bool:
    return ".sharing_" in key and key.endswith("_version")


def shared_values(new_model, old_full: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """``new_model.state_dict()``'s entries filled from the per-position ``old_full``.

    A tensor tied to several names gets the mean of the old values under those names (their
    logical names: ``fc1.parametrizations.weight.original`` is ``fc1.weight``). A position's
    low-rank delta (``lora_A``, ``lora_B``) gets the SVD factors of its residual, its old
    weight minus its set's mean, at the model's rank.
    """
    groups = _tied_groups(new_model)
    state = new_model.state_dict()

    def converted(key: str) -> torch.Tensor:
        names = [logical_name(n) for n in groups.get(key, [key])]
        missing = [n for n in names if n not in old_full]
        if missing:
            raise ConversionError(f"the input model has no '{missing[0]}' to convert from")
        values = [old_full[n] for n in names]
        current = state.get(key, values[0])
        if any(v.shape != current.shape for v in values):
            raise ConversionError(f"'{key}': shape {tuple(values[0].shape)} in the input, "
                                  f"{tuple(current.shape)} in the converted model")
        if all(torch.equal(v, values[0]) for v in values[1:]):  # already tied: exact
            return values[0]
        return torch.stack([v.double() for v in values]).mean(0).to(current.dtype)

    out = {}
    for key, current in state.items():
        if _is_marker(key):
            out[key] = current  # the new model's own map
        elif not is_delta(key):
            out[key] = converted(key)
        elif key.endswith(DELTA_A):
            base = key[: -len(DELTA_A)]
            shared = converted(base + ORIGINAL)
            residual = old_full[logical_name(key)] - shared
            b, a = lora_factors(residual, rank=current.size(0))
            out[key], out[base + DELTA_B] = a.to(current.dtype), b.to(current.dtype)
    return out


def residual_report(old_full, new_full, sharing) -> Dict[str, Dict]:
    """Per stack and position: relative residual before (set mean) and after (converted)."""
    report = {}
    for stack, plan in sharing.items():
        n = len(plan.assignment)
        old_layers = _layer_state(old_full, stack, n)
        new_layers = _layer_state(new_full, stack, n)
        names = sorted(k for k in old_layers[0] if in_scope(k, plan.scope))
        means = []
        for p in range(n):
            members = [q for q in range(n) if plan.assignment[q] == plan.assignment[p]]
            means.append({k: torch.stack([old_layers[q][k] for q in members]).mean(0)
                          for k in names})
        before = position_residuals(old_layers, means, names)
        after = position_residuals(old_layers, new_layers, names)
        report[stack] = {
            "sharing": plan.describe(),
            "layer_to_set": format_assignment(plan.assignment),
            "positions": [
                {"position": p + 1, "set": plan.assignment[p] + 1,
                 "before": round(before[p], 6), "after": round(after[p], 6)}
                for p in range(n)
            ],
        }
    return report


def format_report(report: Dict[str, Dict]) -> str:
    lines = []
    for stack, r in report.items():
        lines.append(f"{stack}: {r['sharing']}")
        lines.append("  position  set  residual before  after")
        for row in r["positions"]:
            lines.append(f"  {row['position']:>8}  {row['set']:>3}  {row['before']:>15.4f}  "
                         f"{row['after']:.4f}")
    return "\n".join(lines)


def convert_model(old_model, new_model):
    """Write the shared values of ``old_model``'s weights into ``new_model``; the report."""
    old_full = _full_state(old_model)
    new_model.load_state_dict(shared_values(new_model, old_full), strict=True)
    return residual_report(old_full, _full_state(new_model), new_model.sharing)


def flag_line(args) -> str:
    """The converted model's sharing flags, as fairseq-train takes them."""
    parts = []
    for stack in STACKS:
        for attr in SHARING_ATTRS:
            value = getattr(args, f"{stack}_{attr}", None)
            flag = f"--{stack}-{attr.replace('_', '-')}"
            if value is True:
                parts.append(flag)
            elif value not in (None, False, 0) or attr == "share_strategy":
                parts += [flag, str(value)]
    return " ".join(parts)


def convert_checkpoint(path_in: str, path_out: str, changes: Dict[str, object],
                       data: Optional[str] = None) -> Dict:
    """Convert the checkpoint ``path_in`` under ``changes`` (see :func:`target_args`) and
    write ``path_out``; return the report (also stored in its ``extra_state``)."""
    checkpoint_io.refuse_overwrite([path_in], [path_out])
    loaded = open_checkpoint(path_in, TOOL, TAKES, data=data)
    new_args = target_args(loaded.cfg.model, changes)
    new_model = loaded.task.build_model(new_args)
    report = {"input": os.path.abspath(path_in), "flags": flag_line(new_args),
              "stacks": convert_model(loaded.model, new_model)}
    state = rebuilt(loaded, new_model, new_args, {"fairseq_shared_conversion": report})
    checkpoint_io.save(state, path_out)
    logger.info(f"wrote {path_out}: {report['flags']}")
    return report


# ---------------------------------------------------------------------------- arithmetic
def set_members(assignment: Sequence[int]) -> List[List[int]]:
    """The positions of each set: ``[0, 1, 1, 0] -> [[0, 3], [1, 2]]``."""
    members: List[List[int]] = [[] for _ in range(max(assignment) + 1)]
    for position, s in enumerate(assignment):
        members[s].append(position)
    return members


def set_means(weights: Sequence[torch.Tensor], assignment: Sequence[int]) -> List[torch.Tensor]:
    """One tensor per set: the mean of its positions' ``weights`` (same shapes)."""
    if len(weights) != len(assignment):
        raise ValueError(f"{len(weights)} weights for {len(assignment)} positions")
    return [
        torch.stack([weights[p] for p in positions]).mean(0)
        for positions in set_members(assignment)
    ]


def lora_factors(residual: torch.Tensor, rank: int, scale: float = 1.0
                 ) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(B, A)`` with ``scale * B @ A`` the best rank-``rank`` approximation of ``residual``.

    ``residual`` is (out, in); B is (out, rank), A is (rank, in). Ranks above
    min(out, in) get zero columns/rows beyond it (the approximation is already exact).
    """
    if residual.dim() != 2:
        raise ValueError(f"need a matrix, got shape {tuple(residual.shape)}")
    if rank < 1:
        raise ValueError(f"rank must be >= 1, got {rank}")
    if scale <= 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    out_dim, in_dim = residual.shape
    u, s, vh = torch.linalg.svd(residual.double(), full_matrices=False)
    r = min(rank, s.numel())
    root = (s[:r] / scale).sqrt()
    b = torch.zeros(out_dim, rank, dtype=torch.float64)
    a = torch.zeros(rank, in_dim, dtype=torch.float64)
    b[:, :r] = u[:, :r] * root
    a[:r] = root[:, None] * vh[:r]
    return b.to(residual.dtype), a.to(residual.dtype)


def relative_residual(original: Mapping[str, torch.Tensor],
                      approx: Mapping[str, torch.Tensor]) -> float:
    """``||W - W'||_F / ||W||_F`` over the tensors of ``original`` (all names of it)."""
    diff = sum(float((original[k].double() - approx[k].double()).pow(2).sum()) for k in original)
    norm = sum(float(original[k].double().pow(2).sum()) for k in original)
    return (diff / norm) ** 0.5 if norm > 0 else 0.0


def position_residuals(originals: Sequence[Dict[str, torch.Tensor]],
                       approxes: Sequence[Dict[str, torch.Tensor]],
                       names: Sequence[str]) -> List[float]:
    """:func:`relative_residual` of every position over the tensors ``names``."""
    return [
        relative_residual({n: o[n] for n in names if n in o}, a)
        for o, a in zip(originals, approxes)
    ]
