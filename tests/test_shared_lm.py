"""The shared decoder-only language model (issue 13): caches per position, generation for
--task language_modeling, parameter counts, flags through fairseq's config, checkpoints,
fairseq-train/fairseq-eval-lm, export to stock transformer_lm and CTranslate2."""

import argparse
import copy
import dataclasses
import inspect
import io
import json
import math
import random
import re

import pytest
import torch
from fairseq import checkpoint_utils
from fairseq.dataclass.utils import convert_namespace_to_omegaconf, gen_parser_from_dataclass
from fairseq.tasks.language_modeling import LanguageModelingTask

from fairseq_shared.models import config, lm_architectures
from fairseq_shared.models.lm_config import (
    SharedTransformerLanguageModelConfig,
    config_with_stack_flags,
)
from fairseq_shared.models.shared_lm import SharedTransformerLanguageModel
from fairseq_shared.sharing.assignment import SharingConfigError, layer_assignment, restrict
from helpers_data import USER_DIR, preprocess_in_process, run_tool
from helpers_lm import (
    TINY_LM,
    build_lm,
    generate,
    generation_args,
    incremental_vs_full,
    lm_sharing_flags,
    parse_lm_args,
    random_tokens,
    teacher_forced_scores,
)
from helpers_model import TINY, build_model, make_dictionary
from helpers_params import stack_params

torch.set_num_threads(1)

STRATEGIES = [("sequence", "2"), ("cycle", "2"), ("cycle_rev", "2"), ("universal", None)]
SCOPES = ["all", "attn", "ffn"]


def tiny_lm(strategy="cycle_rev", m="2", scope="all", extra=(), seed=1):
    """A family architecture (fairseq's base_lm_architecture: pre-LN, input/output dims
    follow the embedding dim) with its sharing flags overridden."""
    flags = TINY_LM + lm_sharing_flags(strategy, m, scope) + list(extra)
    model, task = build_lm("transformer_lm_cycle_rev", flags, seed=seed)
    return model.eval().double(), task


def count(model) -> int:
    return sum(p.numel() for p in model.parameters())  # each tied tensor once


# ---- incremental decoding ---------------------------------------------------------------
@pytest.mark.parametrize("strategy,m", STRATEGIES)
@pytest.mark.parametrize("scope", SCOPES)
def test_incremental_decoding_matches_full_forward(strategy, m, scope):
    model, task = tiny_lm(strategy, m, scope)
    assert model.sharing["decoder"].assignment == layer_assignment(strategy, 4, m and int(m))
    incremental, full, state = incremental_vs_full(
        model, random_tokens(task), task.source_dictionary.pad())
    assert incremental.shape == full.shape == (3 * 7 - 2, len(task.source_dictionary))
    # float32 attention softmax in a float64 model: ~1e-7 noise; a shared cache: ~1e-1
    torch.testing.assert_close(incremental, full, rtol=0, atol=2e-6)
    assert len(state) == 4  # one cache per layer position, tied or not


def test_reusing_one_layer_object_breaks_the_incremental_check():
    """The failure the test above guards against: one layer object at two depths."""
    model, task = tiny_lm("none", None)
    model.decoder.layers[2] = model.decoder.layers[1]
    incremental, full, _ = incremental_vs_full(
        model, random_tokens(task), task.source_dictionary.pad())
    assert (incremental - full).abs().max() > 1e-3


# ---- generation through fairseq's SequenceGenerator / SequenceScorer --------------------
GENERATION = {
    "beam": ("--beam", "4", "--max-len-b", "8"),
    "sampling": ("--sampling", "--sampling-topk", "6", "--beam", "3", "--max-len-b", "8"),
}


@pytest.mark.parametrize("strategy,m", STRATEGIES)
@pytest.mark.parametrize("scope", ["all", "attn"])
@pytest.mark.parametrize("mode", sorted(GENERATION))
def test_generation_with_cache_matches_recomputation(strategy, m, scope, mode):
    model, task = tiny_lm(strategy, m, scope, seed=3)
    prefix = random_tokens(task, bsz=2, length=3, pad_last=False, seed=4)  # eos w w
    flags = GENERATION[mode]
    cached = generate(model, task, prefix, use_cache=True, flags=flags, seed=7)
    recomputed = generate(model, task, prefix, use_cache=False, flags=flags, seed=7)
    beam = int(flags[flags.index("--beam") + 1])
    for sentence, (hyps_a, hyps_b) in enumerate(zip(cached, recomputed)):
        assert len(hyps_a) == len(hyps_b) == beam
        for a, b in zip(hyps_a, hyps_b):
            assert torch.equal(a["tokens"], b["tokens"])
            assert a["tokens"][:2].tolist() == prefix[sentence, 1:].tolist()  # the prompt
            torch.testing.assert_close(a["positional_scores"], b["positional_scores"],
                                       rtol=0, atol=1e-5)
            # one forward pass without any cache (SequenceScorer) gives the same log-probs
            torch.testing.assert_close(teacher_forced_scores(model, task, a["tokens"]),
                                       a["positional_scores"], rtol=0, atol=1e-5)
    if mode == "sampling":  # really sampled: not every hypothesis is the same
        assert len({tuple(h["tokens"].tolist()) for h in cached[0]}) > 1


# ---- parameters ---------------------------------------------------------------------------
def lm_params(vocab, d, f, assignment, scope):
    """Input embedding, output projection, final LayerNorm (pre-LN) and the decoder stack,
    whose layers are an encoder layer's (self-attention, FFN, two LayerNorms)."""
    return 2 * vocab * d + 2 * d + stack_params(d, f, assignment, scope, decoder=False)


@pytest.mark.parametrize("strategy,m", STRATEGIES + [("none", None), ("1,2,2,1", None)])
@pytest.mark.parametrize("scope", SCOPES)
def test_unique_parameter_count_matches_closed_form(strategy, m, scope):
    model, task = tiny_lm(strategy, m, scope)
    assignment = model.sharing["decoder"].assignment
    assert count(model) == lm_params(len(task.source_dictionary), 16, 24, assignment, scope)
    every_name = sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False))
    assert every_name == lm_params(len(task.source_dictionary), 16, 24, list(range(4)), scope)


def test_cycle_rev_6_over_3_has_exactly_the_parameters_of_a_3_layer_transformer_lm():
    shared, _ = build_lm("transformer_lm_cycle_rev",
                         TINY_LM + ["--decoder-layers", "6", "--decoder-unique-layers", "3"])
    # --arch transformer_lm takes its dataclass defaults, not base_lm_architecture (behind
    # every named size, ours included): post-LN (no final LayerNorm) and input/output dims
    # of 512 whatever the embedding dim. The same sizes, spelled out:
    vanilla, _ = build_lm("transformer_lm", TINY_LM + [
        "--decoder-layers", "3", "--decoder-normalize-before",
        "--decoder-input-dim", "16", "--decoder-output-dim", "16"])
    assert type(vanilla).__name__ == "TransformerLanguageModel"
    assert len(shared.decoder.layers) == 6 and len(vanilla.decoder.layers) == 3
    assert shared.sharing["decoder"].assignment == [0, 1, 2, 2, 1, 0]
    assert count(shared) == count(vanilla)
    shapes = lambda m: sorted(tuple(p.shape) for p in m.parameters())  # noqa: E731
    assert shapes(shared) == shapes(vanilla)


@pytest.mark.parametrize("shared_arch,vanilla_arch", [
    ("transformer_lm_cycle_rev_gpt", "transformer_lm_gpt"),
    ("transformer_lm_sequence_big", "transformer_lm_big"),
    ("transformer_lm_cycle", "transformer_lm_big"),  # base: 12 over 6 = 6 layers' parameters
])
def test_size_defaults_come_from_fairseqs_functions(shared_arch, vanilla_arch):
    shared, _ = build_lm(shared_arch, TINY_LM)  # widths overridden, depths the defaults
    vanilla, _ = build_lm(vanilla_arch, TINY_LM + (
        ["--decoder-layers", "6"] if shared_arch == "transformer_lm_cycle" else []))
    sets = len(vanilla.decoder.layers)
    assert len(shared.decoder.layers) == 2 * sets and shared.sharing["decoder"].num_sets == sets
    assert count(shared) == count(vanilla)
    shared_args = parse_lm_args(shared_arch, TINY_LM)
    vanilla_args = parse_lm_args(vanilla_arch, TINY_LM)
    for name in ("activation_fn", "decoder_normalize_before", "dropout", "decoder_embed_dim"):
        assert getattr(shared_args, name) == getattr(vanilla_args, name), name


def test_architecture_defaults_and_overrides():
    universal, _ = build_lm("transformer_lm_universal_gpt", TINY_LM)
    assert universal.sharing["decoder"].assignment == [0] * 12
    attn, _ = build_lm("transformer_lm_attn_shared", TINY_LM)
    layers = attn.decoder.layers
    assert len(layers) == 6 and attn.sharing["decoder"].scope == "attn"
    assert layers[5].self_attn.k_proj.weight is layers[0].self_attn.k_proj.weight
    assert layers[5].fc1.weight is not layers[0].fc1.weight
    base, _ = build_lm("transformer_lm_cycle_rev", TINY_LM)
    assert base.sharing["decoder"].assignment == layer_assignment("cycle_rev", 12, 6)
    override, _ = build_lm("transformer_lm_sequence", TINY_LM + [
        "--decoder-layers", "6", "--decoder-unique-layers", "3", "--decoder-share-scope", "ffn"])
    assert override.sharing["decoder"].assignment == [0, 0, 1, 1, 2, 2]
    assert override.sharing["decoder"].scope == "ffn"
    pattern, _ = build_lm("transformer_lm_cycle", TINY_LM + [
        "--decoder-layers", "4", "--decoder-share-strategy", "1,2,2,2"])
    assert pattern.sharing["decoder"].assignment == [0, 1, 1, 1]


def test_count_params_builds_language_models():
    from fairseq_shared.cli import count_params
    from fairseq_shared.sharing.tying import unique_parameter_count

    shared = count_params.build("transformer_lm_cycle_rev", 64, TINY_LM + [
        "--decoder-layers", "6", "--decoder-unique-layers", "3"])
    vanilla = count_params.build("transformer_lm", 64, TINY_LM + [
        "--decoder-layers", "3", "--decoder-normalize-before",
        "--decoder-input-dim", "16", "--decoder-output-dim", "16"])
    assert (count_params.layers(shared), count_params.layers(vanilla)) == (
        "6 (decoder only)", "3 (decoder only)")
    # --share-decoder-input-output-embed: one 64 x 16 embedding, not two
    expected = lm_params(64, 16, 24, [0, 1, 2], "all") - 64 * 16
    assert unique_parameter_count(shared) == unique_parameter_count(vanilla) == expected


LM_REGISTERED = {family + size for family in lm_architectures.FAMILIES
                 for size in ("", "_big", "_gpt")}


def test_registry_holds_the_lm_names_each_a_findable_function():
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

    ours = {n for n, m in ARCH_MODEL_REGISTRY.items() if m is SharedTransformerLanguageModel}
    assert ours == LM_REGISTERED | {"shared_transformer_lm"} and len(LM_REGISTERED) == 18
    source = inspect.getsource(lm_architectures)
    for name in LM_REGISTERED:  # grep "def NAME" finds every registered architecture
        assert f"\ndef {name}(args):" in source, name
        assert ARCH_CONFIG_REGISTRY[name] is getattr(lm_architectures, name)


# ---- flags: one declaration, fairseq's config machinery, the same errors --------------------
def test_sharing_flags_survive_fairseqs_omegaconf_conversion():
    flags = TINY_LM + ["--decoder-layers", "6", "--decoder-share-strategy", "sequence",
                       "--decoder-unique-layers", "3", "--decoder-share-scope", "attn",
                       "--decoder-share-lora-rank", "2"]  # relaxed sharing: no LM wiring
    args = parse_lm_args("transformer_lm_cycle_rev", flags)
    args.decoder_flag_only_in_add_args = 3  # what a flag without a dataclass field becomes
    cfg = convert_namespace_to_omegaconf(args)
    assert "decoder_flag_only_in_add_args" not in cfg.model  # dropped: the trap
    assert (cfg.model.decoder_share_strategy, cfg.model.decoder_unique_layers,
            cfg.model.decoder_share_scope, cfg.model.decoder_share_lora_rank) == (
        "sequence", 3, "attn", 2)
    d = make_dictionary()
    task = LanguageModelingTask(cfg.task, d, d)
    model = task.build_model(cfg.model)  # as fairseq-train builds it
    assert type(model) is SharedTransformerLanguageModel
    sharing = model.sharing["decoder"]
    assert (sharing.assignment, sharing.scope, sharing.lora_rank) == ([0, 0, 1, 1, 2, 2], "attn", 2)
    model.eval().double()
    incremental, full, _ = incremental_vs_full(model, random_tokens(task), d.pad())
    torch.testing.assert_close(incremental, full, rtol=0, atol=2e-6)


def test_every_decoder_flag_of_the_translation_model_is_a_field_of_the_lm():
    from fairseq.models.transformer import TransformerModel

    from fairseq_shared.models.shared_transformer import SharedTransformerModel

    def dests(model_cls):
        parser = argparse.ArgumentParser()
        model_cls.add_args(parser)
        return {a.dest for a in parser._actions}

    ours = {d for d in dests(SharedTransformerModel) - dests(TransformerModel)
            if d.startswith("decoder_")}
    assert {"decoder_share_strategy", "decoder_unique_layers", "decoder_share_scope"} <= ours
    fields = {f.name for f in dataclasses.fields(SharedTransformerLanguageModelConfig)}
    assert ours <= fields
    assert not {d for d in fields if d.startswith(("encoder_", "san_"))}


def test_a_flag_declared_later_becomes_the_same_flag_of_the_lm():
    """What per-stack flags added to models/config.py get with no further wiring."""
    def add_flags(parser):
        config.add_args(parser)
        parser.add_argument("--decoder-probe-rank", type=int, help="a rank")
        parser.add_argument("--decoder-probe-switch", action="store_true")
        parser.add_argument("--decoder-probe-mode", choices=["a", "b"])
        parser.add_argument("--encoder-probe-rank", type=int)  # not the LM's stack

    derived = config_with_stack_flags(add_flags=add_flags, name="ProbeConfig")
    fields = {f.name: f for f in dataclasses.fields(derived)}
    assert {"decoder_probe_rank", "decoder_probe_switch", "decoder_probe_mode"} <= set(fields)
    assert "encoder_probe_rank" not in fields
    assert fields["decoder_probe_rank"].metadata["help"] == "a rank"
    parser = argparse.ArgumentParser()
    gen_parser_from_dataclass(parser, derived())  # as fairseq adds a dataclass model's flags
    args = parser.parse_args(["--decoder-probe-rank", "4", "--decoder-probe-switch",
                              "--decoder-probe-mode", "b"])
    assert (args.decoder_probe_rank, args.decoder_probe_switch,
            args.decoder_probe_mode) == (4, True, "b")
    assert parser.parse_args([]).decoder_probe_switch is False
    with pytest.raises(SystemExit):  # argparse: invalid choice 'c' (choose from 'a', 'b')
        parser.parse_args(["--decoder-probe-mode", "c"])

    unsupported = {"--decoder-probe-list": dict(type=lambda s: s.split(",")),
                   "--decoder-probe-k": dict(type=int, choices=[1, 2])}
    for flag, kwargs in unsupported.items():  # refused when the module is imported
        with pytest.raises(TypeError, match=f"{flag}: a model flag"):
            config_with_stack_flags(
                add_flags=lambda parser: parser.add_argument(flag, **kwargs), name="Bad")


@pytest.mark.parametrize("flags,needle,via_omegaconf", [
    (["--decoder-share-strategy", "cycle", "--decoder-unique-layers", "0"],
     "--decoder-unique-layers must satisfy 1 <= M <= decoder layers (4)", False),
    (["--decoder-share-strategy", "cycle", "--decoder-unique-layers", "3"],
     "allowed values: [1, 2, 4]", True),
    (["--decoder-share-strategy", "spiral"], "--decoder-share-strategy: unknown strategy "
     "'spiral'; allowed: none, sequence, cycle, cycle_rev, universal, or an explicit pattern",
     False),
    (["--decoder-share-scope", "norms"],
     "--decoder-share-scope: unknown scope 'norms'; allowed: all, attn, ffn", True),
    (["--decoder-share-strategy", "1,2,3"], "has 3 entries but the stack has 4 layers", False),
])
def test_bad_flags_fail_before_building_as_in_the_translation_model(flags, needle, via_omegaconf):
    """``via_omegaconf``: built as fairseq-train builds it, from the converted config."""
    with pytest.raises(SharingConfigError) as lm_error:
        build_lm("shared_transformer_lm", TINY_LM + ["--decoder-layers", "4"] + flags,
                 via_omegaconf=via_omegaconf)
    with pytest.raises(SharingConfigError) as mt_error:
        build_model("shared_transformer", TINY + ["--decoder-layers", "4"] + flags)
    assert str(lm_error.value) == str(mt_error.value)
    assert needle in str(lm_error.value)


def test_the_lm_has_no_encoder_flags():
    with pytest.raises(SystemExit):
        parse_lm_args("transformer_lm_cycle_rev", ["--encoder-share-strategy", "cycle"])


# ---- state dicts, pruning -------------------------------------------------------------------
def test_state_dict_stores_each_tied_tensor_once_and_round_trips_bit_exact():
    model, task = tiny_lm("cycle_rev", "2", "all")
    state = model.state_dict()
    assert not set(model.tied_aliases) & set(state)
    assert "decoder.layers.3.fc1.weight" not in state and "decoder.layers.0.fc1.weight" in state
    assert state["decoder.sharing_map_version"].tolist() == [0, 1, 1, 0]
    stored = sum(v.numel() for k, v in state.items() if k.endswith(("weight", "bias")))
    assert stored == count(model)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    fresh, _ = tiny_lm("cycle_rev", "2", "all", seed=99)
    fresh.load_state_dict(torch.load(buffer, weights_only=True))
    assert fresh.decoder.layers[3].fc1.weight is fresh.decoder.layers[0].fc1.weight
    tokens = random_tokens(task, seed=2)
    with torch.no_grad():
        assert torch.equal(fresh(tokens)[0], model(tokens)[0])


def test_pruned_lm_computes_the_kept_positions_of_the_unpruned_one():
    full, task = tiny_lm("cycle_rev", "2", "all")  # 1 2 2 1
    args = parse_lm_args("transformer_lm_cycle_rev",
                         TINY_LM + lm_sharing_flags("cycle_rev", "2", "all"))
    args.decoder_layers_to_keep = "1,2"  # both of set 2: still tied after pruning
    pruned = task.build_model(args).double().eval()
    pruned.load_state_dict(full.state_dict(), strict=True, model_cfg=args)
    assert pruned.sharing["decoder"].assignment == restrict([0, 1, 1, 0], [1, 2]) == [0, 0]
    assert pruned.decoder.layers[1].fc1.weight is pruned.decoder.layers[0].fc1.weight
    assert args.decoder_share_strategy == "1,1" and args.decoder_layers_to_keep is None
    reference = copy.deepcopy(full)
    reference.decoder.layers = torch.nn.ModuleList([full.decoder.layers[i] for i in (1, 2)])
    tokens = random_tokens(task, seed=5)
    with torch.no_grad():
        assert torch.equal(pruned(tokens)[0], reference(tokens)[0])


# ---- fairseq-train, fairseq-eval-lm, export ------------------------------------------------
LM_TRAIN = [
    "--task", "language_modeling", "--user-dir", USER_DIR, "--arch", "transformer_lm_cycle_rev",
    "--decoder-layers", "4", "--decoder-unique-layers", "2", *TINY_LM,
    "--sample-break-mode", "eos",  # TokenBlockDataset's eos mode: the NumPy 2 fix in compat
    "--tokens-per-sample", "32", "--max-tokens", "512", "--optimizer", "adam", "--lr", "0.01",
    "--max-update", "8", "--seed", "1", "--cpu", "--no-progress-bar", "--log-interval", "1",
    "--num-workers", "0", "--no-epoch-checkpoints",
]
EVAL_LM = ["--cpu", "--gen-subset", "test", "--tokens-per-sample", "32", "--max-tokens", "512",
           "--num-workers", "0", "--sample-break-mode", "none"]


def _write_corpus(root):
    rng = random.Random(0)
    subjects = ["the cat", "a dog", "the bird", "my friend", "the child"]
    verbs = ["sees", "likes", "follows", "hears"]
    objects = ["the tree", "a ball", "the house", "the river", "a song"]
    for split, n in [("train", 300), ("valid", 20), ("test", 20)]:
        lines = [f"{rng.choice(subjects)} {rng.choice(verbs)} {rng.choice(objects)} ."
                 for _ in range(n)]
        (root / f"{split}.txt").write_text("\n".join(lines) + "\n")


def _eval_lm_loss(output) -> float:
    return float(re.search(r"Loss \(base 2\): ([0-9.]+)", output).group(1))


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory):
    """A tiny corpus (fairseq-preprocess --only-source), a transformer_lm_cycle_rev trained
    for 8 updates by fairseq-train, and fairseq-eval-lm of its checkpoint."""
    root = tmp_path_factory.mktemp("lm")
    _write_corpus(root)
    preprocess_in_process("--only-source", "--trainpref", root / "train.txt", "--validpref",
               root / "valid.txt", "--testpref", root / "test.txt", "--destdir", root / "bin",
               "--workers", "1")
    _, train_log = run_tool("fairseq-train", root / "bin", *LM_TRAIN, "--save-dir", root / "ckpt")
    checkpoint = root / "ckpt" / "checkpoint_last.pt"
    _, eval_log = run_tool("fairseq-eval-lm", root / "bin", "--path", checkpoint,
                           "--user-dir", USER_DIR, *EVAL_LM)
    return {"data": root / "bin", "checkpoint": checkpoint, "train_log": train_log,
            "eval_loss": _eval_lm_loss(eval_log)}


def test_fairseq_train_then_eval_lm(lm_run):
    log = lm_run["train_log"]
    assert "decoder: 4 layers over 2 parameter sets, scope=all, layer->set: 1 2 2 1" in log
    assert "num_updates 8" in log and "done training" in log
    uniform = math.log2(len((lm_run["data"] / "dict.txt").read_text().splitlines()) + 4)
    assert 0 < lm_run["eval_loss"] < uniform  # learned something in 8 updates


def test_a_model_under_the_other_kind_of_task_is_named_in_one_line(lm_run, tmp_path_factory):
    """issue 38, item 4: a language model given to fairseq-generate was a size mismatch deep in
    fairseq, a translation model given to fairseq-eval-lm an AttributeError; each is one line
    naming the task, the model's kind and the command that runs it
    (``models/config.check_task``)."""
    from helpers_checkpoint import build_for_data, save_checkpoint
    from helpers_data import data_bin

    data = data_bin(tmp_path_factory)
    args, _, model = build_for_data(data, "transformer_cycle_rev", [
        "--encoder-layers", "2", "--decoder-layers", "2", "--encoder-unique-layers", "1",
        "--decoder-unique-layers", "1"])
    translation = save_checkpoint(tmp_path_factory.mktemp("mt") / "mt.pt", args, model)
    code, out = run_tool("fairseq-generate", data, "--user-dir", USER_DIR, "--path",
                         lm_run["checkpoint"], "--cpu", "--beam", "1", check=False)
    assert code == 1 and "Traceback" not in out
    assert ("fairseq-generate: error: this checkpoint is a language model and the task is "
            "translation; a language model runs under --task language_modeling: use "
            "fairseq-eval-lm") in out
    code, out = run_tool("fairseq-eval-lm", lm_run["data"], "--path", translation,
                         "--user-dir", USER_DIR, *EVAL_LM, check=False)
    assert code == 1 and "Traceback" not in out
    assert ("error: this checkpoint is a translation model and the task is "
            "language_modeling; a translation model runs under --task translation: use "
            "fairseq-generate (or fairseq-interactive)") in out


def test_trained_checkpoint_stores_tied_weights_once_and_loads_weights_only(lm_run):
    path = str(lm_run["checkpoint"])
    raw = torch.load(path, weights_only=True)  # what checkpoint_utils does on torch >= 2.6
    model_cfg = raw["cfg"]["model"]  # a dict: the flags went through fairseq's dataclass
    assert (model_cfg["_name"], model_cfg["decoder_share_strategy"],
            model_cfg["decoder_unique_layers"]) == ("transformer_lm_cycle_rev", "cycle_rev", 2)
    state = raw["model"]
    assert "decoder.layers.0.fc1.weight" in state and "decoder.layers.3.fc1.weight" not in state
    assert state["decoder.sharing_map_version"].tolist() == [0, 1, 1, 0]
    models, _, _ = checkpoint_utils.load_model_ensemble_and_task([path])
    model = models[0]
    assert type(model) is SharedTransformerLanguageModel
    assert model.decoder.layers[3].fc1.weight is model.decoder.layers[0].fc1.weight
    assert torch.equal(model.decoder.layers[3].fc1.weight, state["decoder.layers.0.fc1.weight"])
    stored = sum(v.numel() for k, v in state.items() if k.endswith(("weight", "bias")))
    assert stored == count(model)


def test_export_to_stock_transformer_lm_and_ctranslate2(lm_run, tmp_path, capsys):
    from fairseq_shared.cli.export import main

    out = tmp_path / "export"
    assert main([str(lm_run["checkpoint"]), "--out", str(out), "--ct2", "--sentences", "8"]) == 0
    assert "verify fairseq_plain_vs_shared: 8/8 samples with the same log-probs" in (
        capsys.readouterr().out)
    report = json.loads((out / "export.json").read_text())
    assert report["kind"] == "language_model"  # decided once, on opening (tests/test_export_kind.py)
    plain_check, ct2_check = (report["verify"][k] for k in
                              ("fairseq_plain_vs_shared", "ct2_float32_vs_fairseq"))
    assert plain_check["max_abs_diff"] == 0.0 and plain_check["identical"] == 8
    assert ct2_check["ok"] and ct2_check["max_abs_diff"] <= 1e-4 and ct2_check["tokens"] > 8
    size = report["ct2_float32"]  # CTranslate2 stores the tied weights once: names and
    # vocabulary over them, where two more expanded layers would add 15,680 bytes
    assert 0 <= size["model_bin_bytes"] - size["unique_fp32_weight_bytes"] - size[
        "position_table_bytes"] < 8_000

    path = out / "checkpoint.pt"
    assert torch.serialization.get_unsafe_globals_in_checkpoint(str(path)) == []
    raw = torch.load(path, weights_only=True)
    from fairseq.models.transformer_lm import TransformerLanguageModelConfig

    stock = {f.name for f in dataclasses.fields(TransformerLanguageModelConfig)}
    assert raw["cfg"]["model"]["_name"] == "transformer_lm" and set(raw["cfg"]["model"]) <= stock
    m = raw["model"]
    assert not [k for k in m if "sharing" in k]
    tied = [m[f"decoder.layers.{i}.fc1.weight"].data_ptr() for i in (0, 3)]
    assert tied[0] == tied[1]  # cycle_rev 1 2 2 1: still one tensor, written once
    assert (out / "dict.txt").read_text() == (lm_run["data"] / "dict.txt").read_text()
    # stock fairseq, no --user-dir: the same perplexity as the shared checkpoint
    _, plain_log = run_tool("fairseq-eval-lm", lm_run["data"], "--path", path, *EVAL_LM)
    assert _eval_lm_loss(plain_log) == lm_run["eval_loss"]


def _fairseq_generate(data, checkpoint, out, flags):
    """fairseq-generate's own main, in this process (so that the cache can be switched off)."""
    from fairseq_cli import generate as tool

    tool.main(generation_args(
        "--user-dir", USER_DIR, "--path", str(checkpoint),
        "--gen-subset", "test", "--sample-break-mode", "eos", "--tokens-per-sample", "32",
        "--max-len-b", "14", "--batch-size", "8", "--num-workers", "0", "--cpu", "--seed", "5",
        "--results-path", str(out), *flags, data=data))
    return (out / "generate-test.txt").read_text()


@pytest.mark.parametrize("mode", sorted(GENERATION))
def test_fairseq_generate_with_cache_matches_recomputation(lm_run, tmp_path, monkeypatch, mode):
    """fairseq-generate --task language_modeling (each test line the prompt, a continuation
    generated) prints the same hypotheses and scores with the incremental cache as when every
    step recomputes the whole prefix (fairseq's EnsembleModel told the model has no cache)."""
    from fairseq.models.transformer import TransformerDecoderBase
    from fairseq.sequence_generator import EnsembleModel

    flags, nbest = {"beam": (["--beam", "4"], 1), "sampling": (
        ["--sampling", "--sampling-topk", "6", "--beam", "3", "--nbest", "3"], 3)}[mode]
    with_cache = []  # per decoder call: was an incremental state passed?
    forward = TransformerDecoderBase.forward
    monkeypatch.setattr(TransformerDecoderBase, "forward", lambda self, *a, **kw: (
        with_cache.append(kw.get("incremental_state") is not None), forward(self, *a, **kw))[1])
    cached = _fairseq_generate(lm_run["data"], lm_run["checkpoint"], tmp_path / "cached", flags)
    assert with_cache and all(with_cache)
    with_cache.clear()
    monkeypatch.setattr(EnsembleModel, "has_incremental_states", lambda self: False)
    recomputed = _fairseq_generate(lm_run["data"], lm_run["checkpoint"], tmp_path / "full", flags)
    assert with_cache and not any(with_cache)
    a, b = _generate_lines(cached), _generate_lines(recomputed)
    sources = {key[2:]: text for key, text, _ in a if key.startswith("S-")}
    hyps = [(key[2:], text) for key, text, _ in a if key.startswith("H-")]
    assert len(hyps) == nbest * len(sources) and len(sources) >= 10
    assert sum(len(text.split()) > len(sources[sid].split())
               for sid, text in hyps) >= len(hyps) // 4  # prompts continued, not only echoed
    assert [(key, text) for key, text, _ in a] == [(key, text) for key, text, _ in b]
    for (key, _, scores_a), (_, _, scores_b) in zip(a, b):  # fp32: sums in another order,
        # and P lines are printed to 4 decimals, so a last-bit difference can flip the rounding
        torch.testing.assert_close(scores_a, scores_b, rtol=0,
                                   atol=1.01e-4 if key.startswith("P") else 1e-5)


def _generate_lines(output):
    """(id, text, scores) of fairseq-generate's S/H/D/P lines; a P line's text is empty."""
    lines = []
    for line in output.splitlines():
        kind, _, rest = line.partition("-")
        if kind not in ("S", "H", "D", "P"):
            continue
        fields = rest.split("\t")
        if kind == "P":
            lines.append((f"P-{fields[0]}", "", torch.tensor([float(x) for x in fields[1].split()])))
        elif kind == "S":
            lines.append((f"S-{fields[0]}", fields[1], torch.tensor([])))
        else:
            lines.append((f"{kind}-{fields[0]}", fields[2], torch.tensor([float(fields[1])])))
    return lines
