"""A decoding session as fairseq-generate sets it up: the command line parsed by fairseq's own
parser, the task, the test set and the selected sentences, the batches, the references."""

import ast
import os
import platform
from typing import Dict, List, Optional, Sequence, Union

import numpy as np
import torch

from fairseq_shared.fairseq_commands import USER_DIR
from fairseq_shared.subsets import select_ids
from fairseq_shared.timing import machine
from fairseq_shared.timing.passes import DroppedSentencesError, LoadedModel


def resolve_data(data: str):
    """``data`` is a prepared corpus root (with ``bin/``, ``raw/``, ``spm.model``) or a
    fairseq binarized directory. Returns ``(bin_dir, root_or_None)``."""
    data = os.path.abspath(data)
    if os.path.isdir(os.path.join(data, "bin")):
        return os.path.join(data, "bin"), data
    parent = os.path.dirname(data)
    if os.path.basename(data) == "bin" and os.path.isdir(os.path.join(parent, "raw")):
        return data, parent
    return data, None


def _has_flag(args: Sequence[str], *flags: str) -> bool:
    return any(a == f or a.startswith(f + "=") for a in args for f in flags)


def generation_args(data: str, path: str, extra: Sequence[str] = ()) -> List[str]:
    """The fairseq-generate command line (without the program name) this module runs.

    Adds ``--user-dir``; ``--required-batch-size-multiple 1`` unless given; and, when the
    corpus root has ``spm.model`` and neither ``--bpe`` nor ``--post-process`` is given,
    ``--bpe sentencepiece --sentencepiece-model <root>/spm.model``.
    """
    bin_dir, root = resolve_data(data)
    args = [bin_dir, "--path", path, *extra]
    if not _has_flag(args, "--user-dir"):
        args += ["--user-dir", USER_DIR]
    if not _has_flag(args, "--required-batch-size-multiple"):
        args += ["--required-batch-size-multiple", "1"]
    if (
        root
        and os.path.exists(os.path.join(root, "spm.model"))
        and not _has_flag(args, "--bpe", "--post-process", "--remove-bpe")
    ):
        args += ["--bpe", "sentencepiece", "--sentencepiece-model", os.path.join(root, "spm.model")]
    return args


def parse_generation_cfg(args: Sequence[str]):
    """Parse a fairseq-generate command line with fairseq's own parser -> omegaconf cfg."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    parser = options.get_generation_parser()
    ns = options.parse_args_and_arch(parser, input_args=list(args))
    cfg = convert_namespace_to_omegaconf(ns)
    if cfg.dataset.max_tokens is None and cfg.dataset.batch_size is None:
        cfg.dataset.max_tokens = 12000  # fairseq-generate's default
    return cfg


def _parse_force(force) -> Optional[Union[str, int]]:
    if force is None or force == "" or force == "none":
        return None
    if isinstance(force, int):
        return force
    if force == "reference":
        return "reference"
    if isinstance(force, str) and force.startswith("fixed:"):
        return int(force.split(":", 1)[1])
    if isinstance(force, str) and force.isdigit():
        return int(force)
    raise ValueError(f"force={force!r}: use None, 'reference', an int L or 'fixed:L'")


class ScriptedGenerator:
    """fairseq's SequenceGenerator compiled with ``torch.jit.script``, behind the
    ``generate(models, sample, ...)`` call that ``task.inference_step`` makes (the scripted
    module only exposes ``forward(sample, prefix_tokens, bos_token)``)."""

    def __init__(self, generator):
        from fairseq.sequence_generator import SequenceGenerator

        if type(generator) is not SequenceGenerator:
            raise ValueError(f"--script: only fairseq's SequenceGenerator (beam search) can be "
                             f"scripted, not {type(generator).__name__}; drop --script or the "
                             "options that select another generator (e.g. --print-alignment)")
        self.eos = generator.eos
        self.symbols_to_strip_from_output = generator.symbols_to_strip_from_output
        # prepare_for_inference_ sets each decoder layer's need_attn to --print-alignment,
        # None when unset; TorchScript needs the bool it means (no alignment)
        for module in generator.model.modules():
            if getattr(module, "need_attn", False) is None:
                module.need_attn = False
        self.scripted = torch.jit.script(generator)

    def generate(self, models, sample, prefix_tokens=None, constraints=None, bos_token=None):
        if constraints is not None:
            raise ValueError("--script: lexical constraints need fairseq's eager generator")
        # the scripted forward is typed Dict[str, Dict[str, Tensor]]: only net_input is read
        return self.scripted({"net_input": sample["net_input"]}, prefix_tokens, bos_token)


class Session:
    """A task, its test set and the shared settings; models are added with :meth:`load`."""

    def __init__(self, data: str, first_path: str, extra_args: Sequence[str] = (),
                 subset: Optional[int] = None, force=None, threads: Optional[int] = None,
                 references: Optional[str] = None, script: bool = False):
        from fairseq import tasks, utils

        self.threads = int(threads) if threads else None  # set again before every pass
        if self.threads:
            torch.set_num_threads(self.threads)
        self.args = generation_args(data, first_path, extra_args)
        self.cfg = parse_generation_cfg(self.args)
        cfg = self.cfg
        utils.import_user_module(cfg.common)
        if cfg.common.seed is not None and not cfg.generation.no_seed_provided:
            np.random.seed(cfg.common.seed)
            utils.set_torch_seed(cfg.common.seed)
        self.use_cuda = torch.cuda.is_available() and not cfg.common.cpu
        self.task = tasks.setup_task(cfg.task)
        self.tgt_dict = self.task.target_dictionary
        self.src_dict = getattr(self.task, "source_dictionary", None)
        self.force = _parse_force(force)
        self.overrides = ast.literal_eval(cfg.common_eval.model_overrides)
        self._dataset_loaded = False
        self.subset = subset
        self.references_path = references
        self.script = script
        self.tokenizer = self.task.build_tokenizer(cfg.tokenizer)
        self.bpe = self.task.build_bpe(cfg.bpe)
        self._data_root = resolve_data(data)[1]
        self._order = None
        self.models: list = []  # every loaded model (for max_positions, as in generate)

    # -- helpers mirroring fairseq-generate
    def decode_fn(self, x: str) -> str:
        if self.bpe is not None:
            x = self.bpe.decode(x)
        if self.tokenizer is not None:
            x = self.tokenizer.decode(x)
        return x

    def load(self, name: str, path: str) -> "LoadedModel":
        from fairseq import checkpoint_utils, utils

        from fairseq_shared import checkpoint_io

        cfg = self.cfg
        paths = utils.split_paths(path)
        states = [checkpoint_io.load(p, expect=checkpoint_io.task_kind(cfg.task._name),
                                     tool="time_generate", overrides=self.overrides)
                  for p in paths]
        models, saved_cfg = checkpoint_utils.load_model_ensemble(
            paths,
            state=states[0] if len(paths) == 1 else None,  # read once
            arg_overrides=self.overrides,
            task=self.task,
            suffix=cfg.checkpoint.checkpoint_suffix,
            strict=(cfg.checkpoint.checkpoint_shard_count == 1),
            num_shards=cfg.checkpoint.checkpoint_shard_count,
        )
        if not self._dataset_loaded:
            self.task.load_dataset(cfg.dataset.gen_subset, task_cfg=saved_cfg.task)
            self.dataset = self.task.dataset(cfg.dataset.gen_subset)
            self.ids = select_ids(len(self.dataset), self.subset)
            self._dataset_loaded = True
        for model in models:
            if cfg.common.fp16:
                model.half()
            if self.use_cuda:
                model.cuda()
            model.prepare_for_inference_(cfg)
        params = sum(p.numel() for p in models[0].parameters())
        gen_cfg = cfg.generation
        if self.force is not None:
            from omegaconf import OmegaConf

            gen_cfg = OmegaConf.create(OmegaConf.to_container(cfg.generation, resolve=True))
            if self.force == "reference":
                gen_cfg.max_len_a = 0
                gen_cfg.max_len_b = int(max(self.dataset.tgt_sizes)) + 2
                gen_cfg.min_len = 1
            else:
                gen_cfg.max_len_a = 0
                gen_cfg.max_len_b = int(self.force)
                gen_cfg.min_len = int(self.force)
        generator = self.task.build_generator(models, gen_cfg)
        if self.script:
            generator = ScriptedGenerator(generator)
        return LoadedModel(self, name, path, models, generator, params)

    def batches(self, max_batches: Optional[int] = None, longest: bool = False):
        """fairseq's batches of the selected sentences, in its length order (shortest first);
        ``max_batches``: only the first N, or with ``longest`` the last (longest) N."""
        from fairseq import utils

        cfg = self.cfg
        dataset = self.dataset
        if self._order is None:
            from fairseq.data import data_utils

            wanted = set(self.ids.tolist())
            with data_utils.numpy_seed(cfg.common.seed):
                full_order = dataset.ordered_indices()
            self._order = (
                full_order
                if len(wanted) == len(dataset)
                else np.array([i for i in full_order if i in wanted], dtype=np.int64)
            )
        order = self._order
        # fairseq-generate's default loader process, forked afresh for every pass, does not
        # exit when the pass ends: its shutdown waits out torch's 5 s timeout each pass.
        # The batches are the same collated here, unless --num-workers asks otherwise.
        num_workers = cfg.dataset.num_workers if _has_flag(self.args, "--num-workers") else 0
        dataset.ordered_indices = lambda: order  # only this instance; sizes etc. unchanged
        try:
            itr = self.task.get_batch_iterator(
                dataset=dataset,
                max_tokens=cfg.dataset.max_tokens,
                max_sentences=cfg.dataset.batch_size,
                max_positions=utils.resolve_max_positions(
                    self.task.max_positions(), *[m.max_positions() for m in self.models]
                ),
                ignore_invalid_inputs=cfg.dataset.skip_invalid_size_inputs_valid_test,
                required_batch_size_multiple=cfg.dataset.required_batch_size_multiple,
                seed=cfg.common.seed,
                num_workers=num_workers,
                data_buffer_size=cfg.dataset.data_buffer_size,
                disable_iterator_cache=True,
            ).next_epoch_itr(shuffle=False)
        finally:
            del dataset.ordered_indices
        if longest and max_batches is not None:
            yield from list(itr)[-max_batches:] if max_batches > 0 else []
            return
        for k, sample in enumerate(itr):
            if max_batches is not None and k >= max_batches:
                break
            yield sample

    def references(self) -> (List[str], str):
        """Detokenized references for the selected ids, and where they came from."""
        cfg = self.cfg
        path = self.references_path
        if path is None and self._data_root is not None:
            cand = os.path.join(
                self._data_root, "raw", f"{cfg.dataset.gen_subset}.{self.task.cfg.target_lang}"
            )
            if os.path.exists(cand):
                path = cand
        if path:
            with open(path, encoding="utf-8") as f:
                lines = [line.rstrip("\n") for line in f]
            if len(lines) != len(self.dataset):
                raise DroppedSentencesError(
                    f"references {path} have {len(lines)} lines but the binarized "
                    f"'{cfg.dataset.gen_subset}' set has {len(self.dataset)} sentences"
                )
            return [lines[i] for i in self.ids], path
        refs = []
        for i in self.ids:
            tgt = self.dataset.tgt[int(i)]
            s = self.tgt_dict.string(
                tgt, cfg.common_eval.post_process, escape_unk=True,
                extra_symbols_to_ignore={self.tgt_dict.eos()},
            )
            refs.append(self.decode_fn(s))
        return refs, "binarized targets, detokenized"

    def settings(self) -> Dict:
        cfg = self.cfg
        import fairseq
        import sacrebleu

        return {
            "device": torch.cuda.get_device_name() if self.use_cuda else "cpu",
            "cpu_model": machine.cpu_model(),
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
            "fp16": bool(cfg.common.fp16),
            "beam": cfg.generation.beam,
            "lenpen": cfg.generation.lenpen,
            "max_len_a": cfg.generation.max_len_a,
            "max_len_b": cfg.generation.max_len_b,
            "batch_size": cfg.dataset.batch_size,
            "max_tokens": cfg.dataset.max_tokens,
            "required_batch_size_multiple": cfg.dataset.required_batch_size_multiple,
            "gen_subset": cfg.dataset.gen_subset,
            "sentences_in_set": len(self.dataset),
            "sentences_decoded": int(len(self.ids)),
            "subset": (
                "all" if len(self.ids) == len(self.dataset)
                else f"{len(self.ids)} of {len(self.dataset)}, evenly spaced by id"
            ),
            "force_lengths": self.force,
            "generator": "torch.jit.script(SequenceGenerator)" if self.script else "eager",
            "post_process": cfg.common_eval.post_process,
            "bpe": cfg.bpe._name if cfg.bpe is not None and "_name" in cfg.bpe else None,
            "torch": torch.__version__,
            "fairseq": fairseq.__version__,
            "sacrebleu": sacrebleu.__version__,
            "host": platform.node(),
            "python": platform.python_version(),
            "generate_args": " ".join(self.args[1:]),
        }
