"""Compatibility fixes for fairseq 0.12 on modern PyTorch/NumPy. Kept as narrow as possible.

This module runs when fairseq imports ``--user-dir fairseq_shared`` (``fairseq-train``,
``fairseq-generate``, ``fairseq-interactive`` ...) and on ``import fairseq_shared``.
Every fix is applied once, is idempotent, and is named for what it fixes:

1. :func:`allow_fairseq_checkpoint_globals` -- PyTorch >= 2.6 loads with
   ``weights_only=True``; fairseq 0.12 checkpoints pickle an ``argparse.Namespace`` (legacy
   model config) and, with ``--eval-bleu``, int64 numpy arrays in the metrics state. We
   register exactly those types (:func:`fairseq_checkpoint_safe_globals`) with
   :func:`torch.serialization.add_safe_globals`. Safe loading stays on: a pickle that
   refers to any other global (``os.system``, ``builtins.eval``, ...) is still refused.

2. :func:`patch_cpu_distributed_training` -- fairseq's launcher assumes CUDA. Under
   ``torchrun ... --cpu --distributed-backend gloo --distributed-world-size N`` it divides by
   ``torch.cuda.device_count()`` (``_infer_torch_distributed_launch_init``); without torchrun
   it sizes its process pool with ``min(torch.cuda.device_count(), world_size)``, i.e. zero
   processes on a CPU machine; and it always hands ``DistributedDataParallel`` a CUDA
   ``device_ids``, which PyTorch rejects for a CPU module. We fix the CPU path only; GPU
   runs go through fairseq's code unchanged.

3. :func:`allow_distributed_checkpoint_broadcast` -- when distributed training resumes,
   rank 0 loads the checkpoint and broadcasts it with ``torch.save``/``torch.load``; by then
   its config is an omegaconf ``DictConfig``. Those omegaconf types are allowed for that
   broadcast only (a scoped ``torch.serialization.safe_globals``), not for files.

4. :func:`provide_numpy1_spellings` -- NumPy 2 removed ``numpy.compat`` and (2.4) the
   ``interpolation=`` keyword of ``np.percentile``, which three fairseq data modules still
   use: ``np.compat.long`` in ``token_block_dataset`` (``break_mode="eos"``, e.g.
   ``--task language_modeling --sample-break-mode eos``) and ``language_pair_dataset``
   (``num_buckets > 0``, i.e. translation with ``--num-batch-buckets``), and
   ``np.percentile(..., interpolation=...)`` in ``data_utils.get_buckets`` (the same
   ``num_buckets > 0`` path). Only those modules see an ``np`` that has them; numpy itself is
   not changed.

5. :func:`keep_last_partial_batch_in_generate` -- ``fairseq.data.data_utils.batch_by_size``
   drops the last batch when its size is not a multiple of ``--required-batch-size-multiple``
   (default 8), and its batcher first splits the final batch into a multiple of 8 and the
   rest. ``fairseq-generate`` then translates 16 of 23 test sentences (the 7 longest, as the
   test set is sorted by length) and prints BLEU over those 16, without a word. Only while
   ``fairseq_cli.generate``'s ``_main`` runs is that dropped batch given back; training and
   validation batches are fairseq's.

6. :func:`explain_bad_checkpoint_files` -- fairseq reads every checkpoint file through
   ``checkpoint_utils.load_checkpoint_to_cpu``; for an empty, truncated, non-PyTorch or
   unsafe file PyTorch's error does not name the file, and for some it advises loading with
   ``weights_only=False``; a NaN in a weight (valid CRCs) surfaced later as a misleading error
   about the sharing configuration. The file is read through
   :func:`fairseq_shared.checkpoint_io.read` instead, whose ``CheckpointError`` names it and
   says what is wrong (a NaN or an infinity: the file and the tensor).

7. :func:`resume_past_torn_checkpoints` -- fairseq writes the first checkpoint file of a save
   atomically but *copies* it to ``checkpoint_last.pt``; a kill during that copy leaves a torn
   ``checkpoint_last.pt`` beside an intact interval or epoch checkpoint, and every later
   resume dies on it. When fairseq-train would restore ``checkpoint_last.pt`` (the default
   ``--restore-file``) and it does not load, it restores the newest ``checkpoint*.pt`` of the
   save directory that does, and says so in the log; also when ``checkpoint_last.pt`` is
   missing (a full disk stopped its copy) beside other checkpoints. An explicit
   ``--restore-file`` is never replaced (its error names it). A run whose restored checkpoint
   has reached ``--max-update`` stops there, status 0 (:func:`stop_a_finished_run`): fairseq
   checks the limit only after an update, so re-running a finished command trained one more
   and replaced ``checkpoint_last.pt``.

8. :func:`report_checkpoint_errors_in_one_line` -- fairseq's own commands (fairseq-generate,
   fairseq-train, ...) are not this package's mains, so a ``CheckpointError`` of 6. or 7., or a
   bad sharing or SAN flag (``--encoder-share-strategy cyclic``), left them with a traceback
   above its message. An uncaught :class:`fairseq_shared.errors.FairseqSharedError` alone is
   printed as one line, ``TOOL: error: MESSAGE``, exit status 1; ``FAIRSEQ_SHARED_DEBUG=1`` keeps the
   traceback. Every other exception is Python's as before.

9. :func:`copy_checkpoints_atomically` -- fairseq-train copies the first file of a save to
   the others (``checkpoint_best.pt``, ``checkpoint_last.pt``) with ``PathManager.copy``,
   in place: a full disk leaves a torn ``checkpoint_best.pt``. For local files the copy goes
   through :func:`fairseq_shared.checkpoint_io.atomic_write` instead (the old file or the
   new one; a failure is one line naming the file and the cause).

10. :func:`resume_with_the_batches_of_an_uninterrupted_run` -- fairseq's
   ``FairseqTask.get_batch_iterator`` orders a dataset's examples (which sentences of one
   length go into which batch) with the seed ``seed + epoch`` of the epoch in which it builds
   the iterator, and an uninterrupted run builds it once, in epoch 1, and reuses it. A resume
   in epoch 2 or later builds it in that epoch, so from there on it trains on other batches:
   after a mid-epoch resume in epoch 2 or 3 only 6 of 93 tensors of a toy model ended equal
   (the same with fairseq's own ``transformer``; docs/reliability.md). A reusable iterator
   (fairseq's default; not with ``--rebuild-batches``) is built with epoch 1's seed whatever
   the epoch, so a resume trains on the batches an uninterrupted run trains on.
"""

import argparse
import copy
import functools
import importlib
import logging
import os
import random
import types

import torch

logger = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------
# 1. Safe (weights_only) checkpoint loading
# ---------------------------------------------------------------------------------------

def fairseq_checkpoint_safe_globals() -> list:
    """The only globals a fairseq 0.12 checkpoint pickles beyond ``weights_only``'s defaults.

    Found empirically with ``torch.serialization.get_unsafe_globals_in_checkpoint`` on
    checkpoints written by ``fairseq-train`` (legacy ``--arch`` model; with and without
    ``--eval-bleu``, ``--store-ema``, ``--best-checkpoint-metric bleu``,
    ``--keep-best-checkpoints``, ``--save-interval-updates``) and by ``fairseq-hydra-train``:

    * ``argparse.Namespace`` -- a legacy (``--arch``) model's config, ``cfg["model"]``.
    * ``numpy.ndarray``, ``numpy.dtype``, ``numpy.dtypes.Int64DType`` and the array
      reconstructor ``numpy._core.multiarray._reconstruct`` -- with ``--eval-bleu`` the
      translation task logs its BLEU n-gram counts/totals as int64 arrays, and the metrics
      state (``extra_state["metrics"]``) is saved in every checkpoint.

    Everything else is dict/list/tuple/str/number/None, ``collections.OrderedDict`` and
    tensors, which ``weights_only`` allows anyway (the trainer stores the rest of the
    config as plain containers with enums as strings). A numpy 1.x checkpoint names the
    reconstructor ``numpy.core.multiarray._reconstruct``; that is the same function, so it
    is allowed under that name too.
    """
    import numpy as np

    reconstruct = np._core.multiarray._reconstruct if hasattr(np, "_core") else (
        np.core.multiarray._reconstruct
    )
    allowed = [argparse.Namespace, np.ndarray, np.dtype, reconstruct]
    allowed.append((reconstruct, "numpy.core.multiarray._reconstruct"))
    if hasattr(np, "dtypes"):  # numpy >= 1.25 pickles dtypes as instances of these classes
        allowed.append(np.dtypes.Int64DType)
    return allowed


def allow_fairseq_checkpoint_globals() -> bool:
    """Allow ``torch.load`` (``weights_only=True``) to load fairseq checkpoints.

    Returns False (and does nothing) on a PyTorch without ``add_safe_globals`` (< 2.4),
    where ``torch.load`` does not default to safe loading anyway.
    """
    add_safe_globals = getattr(torch.serialization, "add_safe_globals", None)
    if add_safe_globals is None:
        return False
    add_safe_globals(fairseq_checkpoint_safe_globals())
    return True


# ---------------------------------------------------------------------------------------
# 2. Distributed training on CPU
# ---------------------------------------------------------------------------------------

_TORCHRUN_ENV = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")


def _no_cuda() -> bool:
    return torch.cuda.device_count() == 0


def _check_cpu_backend(dist_cfg) -> None:
    if dist_cfg.distributed_backend == "nccl":
        raise ValueError(
            "distributed training on CPU needs --distributed-backend gloo (got "
            f"--distributed-backend {dist_cfg.distributed_backend!r}; NCCL needs CUDA devices)"
        )


def patch_cpu_distributed_training() -> None:
    """Make fairseq's ``call_main`` and torchrun init work without CUDA devices."""
    from fairseq.distributed import utils as dist_utils

    if getattr(dist_utils, "_fairseq_shared_cpu_patch", False):
        return
    original_launch_init = dist_utils._infer_torch_distributed_launch_init
    original_call_main = dist_utils.call_main

    @functools.wraps(original_launch_init)
    def _infer_torch_distributed_launch_init(cfg):
        """torchrun/torch.distributed.launch: stock code does ``rank % cuda.device_count()``."""
        if not _no_cuda():
            return original_launch_init(cfg)
        _check_cpu_backend(cfg)
        cfg.distributed_init_method = "env://"
        cfg.distributed_world_size = int(os.environ["WORLD_SIZE"])
        cfg.distributed_rank = int(os.environ["RANK"])
        cfg.device_id = 0  # no CUDA device to pick (fairseq calls cuda.set_device if > 0)
        cfg.distributed_no_spawn = True  # processes are created by torchrun

    @functools.wraps(original_call_main)
    def call_main(cfg, main, **kwargs):
        """CPU, world size > 1, no launcher: spawn the workers ourselves (gloo).

        Stock fairseq spawns ``min(torch.cuda.device_count(), world_size)`` = 0 processes on
        a CPU machine. Every other case (GPUs, torchrun, SLURM, an explicit init method with
        --distributed-no-spawn, TPU, a single process) is left to fairseq, after checking
        that the backend can run on CPU.
        """
        dist_cfg = cfg.distributed_training
        cpu = bool(cfg.common.cpu) or _no_cuda()
        if (
            not cpu
            or cfg.common.tpu
            or dist_cfg.distributed_world_size <= 1
            or all(k in os.environ for k in _TORCHRUN_ENV)
        ):
            return original_call_main(cfg, main, **kwargs)
        if dist_cfg.pipeline_model_parallel:
            raise ValueError("pipeline model parallelism needs CUDA devices")
        _check_cpu_backend(dist_cfg)
        slurm = os.environ.get("SLURM_STEP_NODELIST") or os.environ.get("SLURM_JOB_NODELIST")
        if slurm and dist_cfg.distributed_init_method is None:
            return original_call_main(cfg, main, **kwargs)  # one srun task per worker
        if dist_cfg.distributed_init_method is not None:
            if not dist_cfg.distributed_no_spawn:
                raise ValueError(
                    "on CPU, --distributed-init-method needs one process per worker: pass "
                    "--distributed-no-spawn and --distributed-rank to each, or launch with "
                    "torchrun --distributed-backend gloo"
                )
            return original_call_main(cfg, main, **kwargs)
        world_size = dist_cfg.distributed_world_size
        port = dist_cfg.distributed_port
        if port <= 0:
            port = random.randint(10000, 60000)
        dist_cfg.distributed_init_method = f"tcp://localhost:{port}"
        start_rank = dist_cfg.distributed_rank
        dist_cfg.distributed_rank = None  # assigned per spawned process
        kwargs["start_rank"] = start_rank
        logger.info(f"spawning {world_size} CPU worker processes ({dist_cfg.distributed_backend})")
        torch.multiprocessing.spawn(
            fn=dist_utils.distributed_main,
            args=(main, cfg, kwargs),
            nprocs=world_size,
            join=True,
        )

    dist_utils._infer_torch_distributed_launch_init = _infer_torch_distributed_launch_init
    dist_utils.call_main = call_main
    _patch_cpu_ddp_device_ids()
    dist_utils._fairseq_shared_cpu_patch = True


def _patch_cpu_ddp_device_ids() -> None:
    """``--ddp-backend pytorch_ddp`` (the default) on CPU.

    fairseq's ``DistributedFairseqModel`` always passes ``device_ids=[device_id]``, which
    PyTorch's ``DistributedDataParallel`` rejects for a module on CPU ("device_ids ... only
    work with single-device/multiple-device GPU modules or CPU modules"). For CPU modules we
    pass ``device_ids=None, output_device=None``, as PyTorch requires; GPU modules are
    untouched. Only fairseq's wrapper module sees the subclass.
    """
    from fairseq.models import distributed_fairseq_model as dfm

    base = dfm.DistributedDataParallel

    class CPUAwareDistributedDataParallel(base):
        def __init__(self, module, device_ids=None, output_device=None, *args, **kwargs):
            if all(p.device.type == "cpu" for p in module.parameters()):
                device_ids = output_device = None
            super().__init__(module, device_ids, output_device, *args, **kwargs)

    dfm.DistributedDataParallel = CPUAwareDistributedDataParallel


# ---------------------------------------------------------------------------------------
# 3. Resuming distributed training: rank 0 broadcasts the loaded checkpoint
# ---------------------------------------------------------------------------------------


def distributed_broadcast_safe_globals() -> list:
    """Globals in the pickle that ``fairseq.distributed.utils.broadcast_object`` sends.

    ``Trainer.load_checkpoint`` broadcasts the state returned by
    ``checkpoint_utils.load_checkpoint_to_cpu``, whose ``cfg`` it has turned into an
    omegaconf ``DictConfig`` (plain values become ``AnyNode``s; ``Metadata`` records
    ``typing.Any`` and the ``dict``/``list``/``int`` container types, and flags in a
    ``defaultdict``); tensors travel separately, replaced by ``_TensorPlaceholder``s.
    Found with ``torch.serialization.get_unsafe_globals_in_checkpoint`` on that pickle.
    """
    import collections
    import typing

    from fairseq.distributed.utils import _TensorPlaceholder
    from omegaconf import DictConfig, ListConfig
    from omegaconf.base import ContainerMetadata, Metadata
    from omegaconf.nodes import AnyNode

    return [
        _TensorPlaceholder,
        DictConfig,
        ListConfig,
        ContainerMetadata,
        Metadata,
        AnyNode,
        (typing.Any, "typing.Any"),
        collections.defaultdict,
        dict,
        list,
        int,
    ]


def allow_distributed_checkpoint_broadcast() -> None:
    """Let ranks > 0 unpickle the broadcast checkpoint state, with safe loading kept on.

    The extra globals are allowed only while ``_broadcast_object_slow`` runs (scoped
    ``torch.serialization.safe_globals``), never for ``torch.load`` of files.
    """
    from fairseq.distributed import utils as dist_utils

    safe_globals = getattr(torch.serialization, "safe_globals", None)
    if safe_globals is None or getattr(dist_utils, "_fairseq_shared_broadcast_patch", False):
        return
    original = dist_utils._broadcast_object_slow

    @functools.wraps(original)
    def _broadcast_object_slow(*args, **kwargs):
        with safe_globals(distributed_broadcast_safe_globals()):
            return original(*args, **kwargs)

    dist_utils._broadcast_object_slow = _broadcast_object_slow
    dist_utils._fairseq_shared_broadcast_patch = True


# ---------------------------------------------------------------------------------------
# 4. NumPy 2: the NumPy 1.x spellings of three fairseq data modules
# ---------------------------------------------------------------------------------------

#: The fairseq modules that use a NumPy 1.x spelling, which, and what breaks without it.
NUMPY1_MODULES = {
    "fairseq.data.token_block_dataset": "np.compat.long: TokenBlockDataset, break_mode 'eos'",
    "fairseq.data.language_pair_dataset": "np.compat.long: LanguagePairDataset, num_buckets > 0",
    "fairseq.data.data_utils": "np.percentile(interpolation=): get_buckets, num_buckets > 0",
}


class NumpyWithNumpy1Spellings(types.ModuleType):
    """numpy as the modules of NUMPY1_MODULES see it: every attribute is numpy's own object
    (``proxy.zeros is numpy.zeros``) except ``compat.long``, which NumPy 1.x defined as
    ``int`` (``numpy/compat/py3k.py``; ``dtype=int`` is int64 as before), and ``percentile``,
    which passes ``interpolation=`` on as its NumPy >= 1.22 name ``method=``."""

    compat = types.SimpleNamespace(long=int)

    @staticmethod
    def percentile(a, q, *args, interpolation=None, **kwargs):
        import numpy

        if interpolation is not None:
            kwargs["method"] = interpolation
        return numpy.percentile(a, q, *args, **kwargs)

    def __getattr__(self, name):
        import numpy

        return getattr(numpy, name)


def provide_numpy1_spellings() -> bool:
    """Rebind the name ``np`` in each module of NUMPY1_MODULES to
    :class:`NumpyWithNumpy1Spellings`. Returns False (and does nothing) on NumPy < 2.

    Why not give numpy itself a ``numpy.compat``: that changes numpy for every module in the
    process (code that checks ``hasattr(np, "compat")`` would take NumPy 2 for 1.x) to fix
    three call sites. Why not replace the fairseq functions: two of them are long methods of
    which one line needs the old spelling, and copying fairseq code is what this package
    avoids. Rebinding one module global changes what exactly those modules' ``np.compat``
    and ``np.percentile`` mean, and nothing else.
    """
    import numpy

    if hasattr(numpy, "compat"):  # NumPy < 2: fairseq works as written
        return False
    for name in NUMPY1_MODULES:
        module = importlib.import_module(name)
        if not isinstance(module.np, NumpyWithNumpy1Spellings):
            module.np = NumpyWithNumpy1Spellings("numpy", NumpyWithNumpy1Spellings.__doc__)
    return True


# ---------------------------------------------------------------------------------------
# 5. fairseq-generate translates every sentence
# ---------------------------------------------------------------------------------------

def batch_by_size_keeping_last_partial_batch(batch_by_size):
    """``batch_by_size`` with the final batch that it dropped for not being a multiple of
    ``required_batch_size_multiple`` given back (the batches are consecutive runs of
    ``indices``, so the dropped batch is the tail that no batch covers)."""
    import numpy as np

    @functools.wraps(batch_by_size)
    def keeping(indices, *args, **kwargs):
        if not isinstance(indices, np.ndarray):
            indices = np.fromiter(indices, dtype=np.int64, count=-1)
        batches = batch_by_size(indices, *args, **kwargs)
        covered = sum(len(b) for b in batches)
        if covered < len(indices):
            batches = [*batches, indices[covered:]]
        return batches

    keeping.keeps_last_partial_batch = True
    return keeping


def _generate_modules() -> list:
    """The loaded copies of ``fairseq_cli/generate.py``: the imported module, and
    ``__main__`` under ``python -m fairseq_cli.generate``."""
    import sys

    modules = [importlib.import_module("fairseq_cli.generate")]
    main = sys.modules.get("__main__")
    if getattr(getattr(main, "__spec__", None), "name", None) == "fairseq_cli.generate":
        modules.append(main)
    return modules


def keep_last_partial_batch_in_generate() -> None:
    """Wrap ``fairseq_cli.generate._main`` so that, while it runs, ``data_utils.batch_by_size``
    keeps its last partial batch (see 5. above). Idempotent."""
    from fairseq.data import data_utils

    for module in _generate_modules():
        original = module._main
        if getattr(original, "keeps_last_partial_batch", False):
            continue

        @functools.wraps(original)
        def _main(cfg, output_file, _original=original):
            stock = data_utils.batch_by_size
            data_utils.batch_by_size = batch_by_size_keeping_last_partial_batch(stock)
            try:
                return _original(cfg, output_file)
            finally:
                data_utils.batch_by_size = stock

        _main.keeps_last_partial_batch = True
        module._main = _main


# ---------------------------------------------------------------------------------------
# 6. A bad checkpoint file gets a message that names it
# ---------------------------------------------------------------------------------------


def explain_bad_checkpoint_files() -> None:
    """``checkpoint_utils.load_checkpoint_to_cpu`` reads through ``checkpoint_io.read``."""
    from fairseq import checkpoint_utils

    if getattr(checkpoint_utils, "_fairseq_shared_read_patch", False):
        return
    original = checkpoint_utils.load_checkpoint_to_cpu

    @functools.wraps(original)
    def load_checkpoint_to_cpu(path, *args, **kwargs):
        from fairseq_shared.checkpoint_io import read

        return read(path, lambda p: original(p, *args, **kwargs))

    checkpoint_utils.load_checkpoint_to_cpu = load_checkpoint_to_cpu
    checkpoint_utils._fairseq_shared_read_patch = True


# ---------------------------------------------------------------------------------------
# 7. A torn checkpoint_last.pt does not stop a resume
# ---------------------------------------------------------------------------------------


def _restoring(cfg, path: str):
    """A copy of the checkpoint config that restores ``path`` (as ``--restore-file PATH``;
    ``--finetune-from-model`` is ignored by a resume anyway, and fairseq refuses both)."""
    cfg = copy.deepcopy(cfg)
    cfg.restore_file = path
    if getattr(cfg, "finetune_from_model", None) is not None:
        cfg.finetune_from_model = None
    return cfg


def resume_past_torn_checkpoints() -> None:
    """Wrap ``checkpoint_utils.load_checkpoint`` (fairseq-train's resume) as described in 7."""
    from fairseq import checkpoint_utils

    if getattr(checkpoint_utils, "_fairseq_shared_resume_patch", False):
        return
    original = checkpoint_utils.load_checkpoint

    @functools.wraps(original)
    def load_checkpoint(cfg, trainer, **passthrough_args):
        loaded = load_past_torn_checkpoints(cfg, trainer, **passthrough_args)
        stop_a_finished_run(trainer)
        return loaded

    def load_past_torn_checkpoints(cfg, trainer, **passthrough_args):
        from fairseq_shared import checkpoint_io

        suffix = getattr(trainer, "checkpoint_suffix", "") or ""
        last = os.path.join(cfg.save_dir, f"checkpoint_last{suffix}.pt")
        if cfg.restore_file != "checkpoint_last.pt":
            return original(cfg, trainer, **passthrough_args)
        if not os.path.lexists(last):
            fallback = (None if getattr(cfg, "finetune_from_model", None) else
                        checkpoint_io.newest_intact(cfg.save_dir, suffix=suffix))
            if fallback is not None:
                logger.warning(f"{last} is missing; resuming from {fallback} instead, the "
                               f"newest checkpoint in {cfg.save_dir} that loads")
                return original(_restoring(cfg, fallback), trainer, **passthrough_args)
            return original(cfg, trainer, **passthrough_args)
        if not os.path.isfile(last):
            return original(cfg, trainer, **passthrough_args)
        try:
            checkpoint_io.check_readable(last)
        except checkpoint_io.CheckpointError as e:
            problem = str(e)
        else:
            if getattr(trainer, "data_parallel_world_size", 1) > 1:
                return original(cfg, trainer, **passthrough_args)  # every rank must agree
            try:
                return original(cfg, trainer, **passthrough_args)
            except checkpoint_io.NonFiniteError:
                raise  # a whole file whose model diverged or was corrupted: not a torn one
            except checkpoint_io.CheckpointError as e:
                if last not in str(e) or "refused by safe loading" in str(e):
                    raise  # not about this file, or unsafe: not a torn file to skip
                problem = str(e)
        fallback = checkpoint_io.newest_intact(cfg.save_dir, exclude=[last], suffix=suffix)
        if fallback is None:
            raise checkpoint_io.CheckpointError(
                f"{problem}; no other checkpoint*{suffix}.pt in {cfg.save_dir} loads either, "
                f"so there is nothing to resume from: move {last} away to train from scratch"
            )
        logger.warning(f"{problem}; resuming from {fallback} instead, the newest checkpoint "
                       f"in {cfg.save_dir} that loads")
        return original(_restoring(cfg, fallback), trainer, **passthrough_args)

    checkpoint_utils.load_checkpoint = load_checkpoint
    checkpoint_utils._fairseq_shared_resume_patch = True


def stop_a_finished_run(trainer) -> None:
    """Exit (status 0, nothing written) when the restored checkpoint has already reached
    ``--max-update``: fairseq's loop checks the limit only after an update, so it would train
    one more and replace ``checkpoint_last.pt``."""
    import sys

    limit = trainer.cfg.optimization.max_update
    done = trainer.get_num_updates()
    if limit and done >= limit:
        logger.info(f"the restored checkpoint is at update {done}, --max-update {limit} is "
                    "reached: nothing to train (raise --max-update to train on)")
        sys.exit(0)


# ---------------------------------------------------------------------------------------
# 8. fairseq's own commands report the plug-in's errors in one line
# ---------------------------------------------------------------------------------------


def report_checkpoint_errors_in_one_line() -> None:
    """Chain ``sys.excepthook`` as described in 8. Idempotent."""
    import sys

    previous = sys.excepthook
    if getattr(previous, "_fairseq_shared_one_line", False):
        return

    def excepthook(kind, error, traceback):
        from fairseq_shared.checkpoint_io import debug_enabled
        from fairseq_shared.errors import FairseqSharedError, one_line

        if (issubclass(kind, FairseqSharedError) and not debug_enabled()
                and not getattr(error, "fairseq_shared_debug", False)):  # --debug: cli/errors.py
            tool = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "fairseq"
            print(f"{tool}: error: {one_line(error)} "
                  f"(FAIRSEQ_SHARED_DEBUG=1 shows the traceback)", file=sys.stderr)
            return
        previous(kind, error, traceback)

    excepthook._fairseq_shared_one_line = True
    sys.excepthook = excepthook


# ---------------------------------------------------------------------------------------
# 9. fairseq-train's copies of a checkpoint are atomic
# ---------------------------------------------------------------------------------------


class _AtomicCopies:
    """fairseq's ``PathManager`` with ``copy`` of local files through ``atomic_write``."""

    def __init__(self, path_manager):
        self._path_manager = path_manager

    def copy(self, src_path: str, dst_path: str, overwrite: bool = False) -> bool:
        from fairseq_shared import checkpoint_io

        if "://" in str(src_path) or "://" in str(dst_path):
            return self._path_manager.copy(src_path, dst_path, overwrite)
        if not overwrite and os.path.exists(dst_path):
            return False
        checkpoint_io.copy_file(src_path, dst_path)
        return True

    def __getattr__(self, name):
        return getattr(self._path_manager, name)


def copy_checkpoints_atomically() -> None:
    """Give ``fairseq.checkpoint_utils`` the ``PathManager`` of 9. Idempotent."""
    from fairseq import checkpoint_utils

    if not isinstance(checkpoint_utils.PathManager, _AtomicCopies):
        checkpoint_utils.PathManager = _AtomicCopies(checkpoint_utils.PathManager)


# ---------------------------------------------------------------------------------------
# 10. A resume in epoch 2 or later trains on the uninterrupted run's batches
# ---------------------------------------------------------------------------------------


def resume_with_the_batches_of_an_uninterrupted_run() -> None:
    """Wrap ``FairseqTask.get_batch_iterator`` as described in 10. Idempotent."""
    from fairseq.tasks.fairseq_task import FairseqTask

    original = FairseqTask.get_batch_iterator
    if getattr(original, "_fairseq_shared_epoch_1_batches", False):
        return

    @functools.wraps(original)
    def get_batch_iterator(self, dataset, *args, epoch=1, disable_iterator_cache=False,
                           update_epoch_batch_itr=False, **kwargs):
        reusable = (epoch > 1 and not disable_iterator_cache and not update_epoch_batch_itr
                    and not getattr(self.cfg, "rebuild_batches", False)
                    and self.can_reuse_epoch_itr(dataset)
                    and dataset not in self.dataset_to_epoch_iter)
        iterator = original(self, dataset, *args, epoch=1 if reusable else epoch,
                            disable_iterator_cache=disable_iterator_cache,
                            update_epoch_batch_itr=update_epoch_batch_itr, **kwargs)
        if reusable:  # the batches of epoch 1; the epoch the caller asked for
            iterator.epoch = epoch
            dataset.set_epoch(epoch)
        return iterator

    get_batch_iterator._fairseq_shared_epoch_1_batches = True
    FairseqTask.get_batch_iterator = get_batch_iterator


allow_fairseq_checkpoint_globals()
patch_cpu_distributed_training()
allow_distributed_checkpoint_broadcast()
provide_numpy1_spellings()
keep_last_partial_batch_in_generate()
explain_bad_checkpoint_files()
resume_past_torn_checkpoints()
report_checkpoint_errors_in_one_line()
copy_checkpoints_atomically()
resume_with_the_batches_of_an_uninterrupted_run()
