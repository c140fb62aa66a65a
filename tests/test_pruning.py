"""LayerDrop pruning (``*_layers_to_keep``) of shared models (issue 11): the kept positions
keep their sets, and the pruned model computes what the unpruned one computes with the
other layers removed, as fairseq's Transformer does."""

import copy
import re

import pytest
import torch
from fairseq import checkpoint_utils

from fairseq_shared.export.api import export
from fairseq_shared.sharing.assignment import layer_assignment, restrict
from helpers_data import USER_DIR, data_bin, run_tool, trained_checkpoints
from helpers_model import TINY, make_dictionary, parse_args, random_batch

torch.set_num_threads(1)


def build(flags, keep=None, seed=1):
    from fairseq.tasks.translation import TranslationTask

    args = parse_args("shared_transformer", TINY + flags)
    if keep:  # as --model-overrides passes them: strings
        args.encoder_layers_to_keep, args.decoder_layers_to_keep = keep
    d = make_dictionary()
    task = TranslationTask(args, d, d)
    torch.manual_seed(seed)
    return task.build_model(args).eval(), task, args


def flags_for(strategy, m, scope="all", layers=6):
    flags = ["--encoder-layers", str(layers), "--decoder-layers", str(layers)]
    for stack in ("encoder", "decoder"):
        flags += [f"--{stack}-share-strategy", strategy, f"--{stack}-share-scope", scope]
        flags += [f"--{stack}-unique-layers", m] if m else []
    return flags


def without_layers(model, keep):
    """The reference: the unpruned model with the other layers taken out."""
    ref = copy.deepcopy(model)
    for stack, kept in zip((ref.encoder, ref.decoder), keep):
        stack.layers = torch.nn.ModuleList(
            [stack.layers[int(i)] for i in sorted(int(i) for i in kept.split(","))])
    return ref


@pytest.mark.parametrize("strategy,m,scope,keep", [
    ("cycle_rev", "3", "all", ("0,2,4", "0,2,4")),  # the command
    ("cycle_rev", "3", "all", ("1,4", "0,3,5")),  # 1,4 both use set 2: still tied
    ("sequence", "3", "attn", ("0,1,5", "2,3")),
    ("cycle", "2", "ffn", ("5,0,3", "1")),
])
def test_pruned_model_equals_the_kept_positions_of_the_unpruned_model(strategy, m, scope, keep):
    full, task, _ = build(flags_for(strategy, m, scope))
    pruned, _, args = build(flags_for(strategy, m, scope), keep=keep, seed=9)
    pruned.load_state_dict(full.state_dict(), strict=True, model_cfg=args)
    for stack, kept in zip(("encoder", "decoder"), keep):
        positions = [int(i) for i in kept.split(",")]
        assert pruned.sharing[stack].assignment == restrict(
            layer_assignment(strategy, 6, int(m)), positions)
    src, lengths, prev = random_batch(task, seed=4)
    with torch.no_grad():
        expected = without_layers(full, keep)(src, lengths, prev)[0]
        assert torch.equal(pruned(src, lengths, prev)[0], expected)
    if keep[0] == "1,4":  # the kept layers of one set are still one set
        assert pruned.encoder.layers[0].fc1.weight is pruned.encoder.layers[1].fc1.weight
    assert args.encoder_layers_to_keep is None  # as fairseq's prune_state_dict leaves it


def test_a_saved_pruned_model_loads_again_as_it_was(tmp_path):
    full, task, _ = build(flags_for("cycle_rev", "3"))
    pruned, _, args = build(flags_for("cycle_rev", "3"), keep=("1,4", "0,5"), seed=9)
    pruned.load_state_dict(full.state_dict(), model_cfg=args)
    assert args.encoder_share_strategy == "1,1" and args.encoder_layers == 2
    path = tmp_path / "pruned.pt"
    history = [{"criterion_name": "x", "optimizer_name": "x", "lr_scheduler_state": {},
                "num_updates": 0}]
    torch.save({"args": args, "cfg": None, "model": pruned.state_dict(),
                "optimizer_history": history, "extra_state": {}}, path)
    models, _ = checkpoint_utils.load_model_ensemble([str(path)], task=task)
    src, lengths, prev = random_batch(task, seed=4)
    with torch.no_grad():
        assert torch.equal(models[0].eval()(src, lengths, prev)[0], pruned(src, lengths, prev)[0])


def test_fairseq_generate_prunes_a_shared_checkpoint_as_it_prunes_fairseqs_transformer(
        tmp_path, tmp_path_factory):
    """The issue's command on a trained cycle_rev 4+4 checkpoint over 2 sets, against stock
    fairseq pruning the same weights as a plain transformer (the export)."""
    checkpoint = trained_checkpoints(tmp_path_factory) / "checkpoint_last.pt"
    data = data_bin(tmp_path_factory)
    plain = export(str(checkpoint), str(tmp_path), data=str(data), sentences=0)["plain_checkpoint"]
    overrides = "{'encoder_layers_to_keep':'0,2','decoder_layers_to_keep':'1,2,3'}"
    common = ["--beam", "4", "--batch-size", "4", "--cpu", "--model-overrides", overrides,
              "--required-batch-size-multiple", "1"]
    _, shared = run_tool("fairseq-generate", data, "--path", checkpoint, "--user-dir", USER_DIR,
                         *common)
    _, stock = run_tool("fairseq-generate", data, "--path", plain, *common)
    hyps = lambda out: sorted(re.findall(r"^H-(\d+)\t(\S+)\t(.*)$", out, re.M))  # noqa: E731
    assert len(hyps(shared)) == 12
    assert hyps(shared) == hyps(stock)
    assert "encoder: 2 layers over 2 parameter sets" in shared  # sets 1 and 2 of 1 2 2 1
