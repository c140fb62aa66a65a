"""Relaxed sharing (issue 12): per-position low-rank deltas on tied Linear weights, untied
LayerNorms and biases (fairseq_shared/modules/lora.py, models/shared_stacks.py).

Where a relaxed model is compared with something else, its deltas (and untied norms and
biases) first get random values (``relax_randomly``; a fresh model's deltas are zero), so
that a delta applied on one path only, lost in a checkpoint or dropped by an export shows up
as a difference of order 1e-1."""

import io
import re

import pytest
import torch
from fairseq import checkpoint_utils

from fairseq_shared.sharing.assignment import SharingConfigError, SharingMismatchError
from helpers_model import (
    TINY,
    build_model,
    cached_and_recomputed_beams,
    incremental_vs_full,
    make_dictionary,
    parse_args,
    random_batch,
)
from helpers_params import model_params

torch.set_num_threads(1)
D, F = 16, 24  # TINY's model and FFN dims
# float64 models; fairseq's attention softmax runs in float32 (~1e-7): a missing delta or
# a wrong cache differs by ~1e-1
ATOL = 2e-6


def flags(strategy="cycle_rev", m="2", scope="all", layers=4, rank=0, norms=False,
          biases=False):
    out = ["--encoder-layers", str(layers), "--decoder-layers", str(layers)]
    for stack in ("encoder", "decoder"):
        out += [f"--{stack}-share-strategy", strategy, f"--{stack}-share-scope", scope]
        out += [f"--{stack}-unique-layers", m] if m else []
        out += [f"--{stack}-share-lora-rank", str(rank)]
        out += [f"--{stack}-untie-norms"] if norms else []
        out += [f"--{stack}-untie-biases"] if biases else []
    return out


def tiny(*args, seed=1, extra=(), **kwargs):
    model, task = build_model("shared_transformer", TINY + flags(*args, **kwargs) + list(extra),
                              seed=seed)
    return model.eval().double(), task


def relax_randomly(model, seed=0):
    """Random deltas (B), and random per-position offsets of the untied norms and biases."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=p.dtype)
            if name.endswith("lora_B"):
                p.copy_(0.3 * noise)
            elif ".layers." in name and (name.endswith("bias") or "layer_norm" in name):
                p.add_(0.1 * noise)
    return model


def outputs(model, task, seed=11):
    src, lengths, prev = random_batch(task, seed=seed)
    with torch.no_grad():
        return model(src, lengths, prev)[0]


def lora_B(layer, path):
    return layer.get_submodule(path).parametrizations.weight[0].lora_B


# ---- a fresh relaxed model is the rigidly tied one ---------------------------------------
@pytest.mark.parametrize("relaxation", [dict(rank=3), dict(rank=2, norms=True, biases=True)])
def test_fresh_relaxed_model_is_the_rigidly_tied_model(relaxation):
    rigid, task = tiny()
    relaxed, _ = tiny(**relaxation)
    plain_rigid, plain_relaxed = rigid.full_state_dict(), relaxed.full_state_dict()
    assert plain_relaxed.keys() == plain_rigid.keys()
    for name, value in plain_rigid.items():  # every position sees exactly the tied weights
        assert torch.equal(plain_relaxed[name], value), name
    torch.testing.assert_close(outputs(relaxed, task), outputs(rigid, task), rtol=0, atol=ATOL)
    # ... and trains away from it: the deltas matter
    relax_randomly(relaxed)
    assert (outputs(relaxed, task) - outputs(rigid, task)).abs().max() > 1e-2


# ---- incremental decoding and beam search, every strategy and scope -----------------------
RELAXED_STRATEGIES = [("sequence", "2"), ("cycle", "2"), ("cycle_rev", "2"), ("universal", None)]


@pytest.mark.parametrize("strategy,m", RELAXED_STRATEGIES)
@pytest.mark.parametrize("scope", ["all", "attn", "ffn"])
def test_relaxed_incremental_decoding_and_cached_beam_search(strategy, m, scope):
    """The full pass takes fairseq's fast path (``F.multi_head_attention_forward`` reads
    ``q_proj.weight`` ...), incremental decoding calls the modules: both see the deltas."""
    model, task = tiny(strategy, m, scope, rank=2, biases=True, norms=scope == "all", seed=3)
    relax_randomly(model)
    incremental, full, _ = incremental_vs_full(model, task)
    torch.testing.assert_close(incremental, full, rtol=0, atol=ATOL)
    src, lengths, _ = random_batch(task, bsz=3, seed=5)
    for a, b in cached_and_recomputed_beams(model, task, src, lengths, beam=3):
        assert torch.equal(a["tokens"], b["tokens"])
        torch.testing.assert_close(a["score"], b["score"], rtol=0, atol=1e-5)


def test_both_attention_paths_see_the_delta():
    model, task = tiny(rank=2)
    relax_randomly(model)
    attention = model.decoder.layers[3].self_attn
    x = torch.randn(5, 2, D, dtype=torch.float64)
    with torch.no_grad():
        fast, _ = attention(x, x, x, need_weights=False)  # F.multi_head_attention_forward
        attention.skip_embed_dim_check = True  # fairseq's own path: calls q_proj(x) ...
        modules, _ = attention(x, x, x, need_weights=False)
        attention.skip_embed_dim_check = False
        delta = lora_B(model.decoder.layers[3], "self_attn.q_proj")
        delta.zero_()
        rigid, _ = attention(x, x, x, need_weights=False)
    torch.testing.assert_close(fast, modules, rtol=0, atol=ATOL)
    assert (fast - rigid).abs().max() > 1e-3


# ---- SAN -----------------------------------------------------------------------------------
def test_relaxed_sharing_composes_with_san():
    """Decoder 1 2 2 (cycle_rev M=2) with SAN blocks {1},{2,3}: layers 2 and 3 share set 2;
    layer 3 follows layer 2 (no Q/K, and no encoder-decoder attention of its own)."""
    san = ["--san-self-policy", "1,2", "--san-cross-policy", "1,2"]
    model, task = tiny(layers=3, rank=2, biases=True, extra=san, seed=4)
    relax_randomly(model)
    leader, follower = model.decoder.layers[1], model.decoder.layers[2]
    assert lora_B(leader, "self_attn.v_proj") is not lora_B(follower, "self_attn.v_proj")
    assert leader.self_attn.v_proj.parametrizations.weight.original is (
        follower.self_attn.v_proj.parametrizations.weight.original)
    # the leader's Q is used by no other position of its set: not tied, no delta
    assert not hasattr(leader.self_attn.q_proj, "parametrizations")
    incremental, full, _ = incremental_vs_full(model, task)
    torch.testing.assert_close(incremental, full, rtol=0, atol=ATOL)
    src, lengths, _ = random_batch(task, bsz=3, seed=5)
    for a, b in cached_and_recomputed_beams(model, task, src, lengths, beam=3):
        assert torch.equal(a["tokens"], b["tokens"])
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    again, _ = tiny(layers=3, rank=2, biases=True, extra=san, seed=9)
    again.load_state_dict(torch.load(buffer, weights_only=True))
    assert torch.equal(outputs(again, task), outputs(model, task))


# ---- parameter count in closed form --------------------------------------------------------
def relaxed_extra(assignment, scope, decoder, rank, norms=False, biases=False, d=D, f=F):
    """What relaxation adds to a stack (README, "Relaxed sharing"): with T the positions
    whose set has more than one position and N - M the positions minus the sets,
    T * R * sum(d_in + d_out) + [biases] (N - M) * sum(d_out) over the tied Linears,
    + [norms, scope all] (N - M) * 2d per LayerNorm."""
    tied_positions = sum(1 for s in assignment if assignment.count(s) > 1)
    aliases = len(assignment) - len(set(assignment))
    attn = [(d, d)] * (8 if decoder else 4)
    linears = {"all": attn + [(d, f), (f, d)], "attn": attn, "ffn": [(d, f), (f, d)]}[scope]
    extra = tied_positions * rank * sum(i + o for i, o in linears)
    extra += aliases * sum(o for _, o in linears) if biases else 0
    extra += aliases * (3 if decoder else 2) * 2 * d if norms and scope == "all" else 0
    return extra


@pytest.mark.parametrize("strategy,m,scope,relaxation", [
    ("cycle_rev", "2", "all", dict(rank=2)),
    ("cycle_rev", "2", "all", dict(rank=3, norms=True, biases=True)),
    ("1,1,2,3", None, "attn", dict(rank=2, biases=True)),  # sets 2 and 3: one position each
    ("universal", None, "ffn", dict(rank=1, norms=True, biases=True)),  # ffn ties no norms
])
def test_parameter_count_matches_closed_form(strategy, m, scope, relaxation):
    model, task = tiny(strategy, m, scope, extra=["--share-all-embeddings"], **relaxation)
    counted = sum(p.numel() for p in model.parameters())
    enc, dec = model.sharing["encoder"].assignment, model.sharing["decoder"].assignment
    rigid = model_params(len(task.source_dictionary), len(task.target_dictionary), D, F, enc, dec,
                         scope, scope, share_all_embeddings=True)
    extra = (relaxed_extra(enc, scope, False, **relaxation)
             + relaxed_extra(dec, scope, True, **relaxation))
    assert counted == rigid + extra
    from fairseq_shared.sharing.lora import delta_parameter_count

    tied = sum(1 for s in enc if enc.count(s) > 1) * relaxation["rank"]
    assert delta_parameter_count(model.encoder) == tied * (
        {"all": 8 * D + 2 * (D + F), "attn": 8 * D, "ffn": 2 * (D + F)}[scope])


# ---- flags ---------------------------------------------------------------------------------
@pytest.mark.parametrize("bad,needle", [
    (["--encoder-share-lora-rank", "-1"],
     "--encoder-share-lora-rank: '-1' is not a rank; allowed: an integer >= 0"),
    (["--decoder-share-strategy", "none", "--decoder-share-lora-rank", "4"],
     "--decoder-share-lora-rank 4: the decoder ties no parameters .* allowed: 0 \\(off\\)"),
    (["--encoder-share-strategy", "none", "--encoder-untie-biases"],
     "--encoder-untie-biases: the encoder ties no parameters"),
])
def test_bad_relaxation_flags_fail_before_building(bad, needle):
    with pytest.raises(SharingConfigError, match=needle):
        build_model("shared_transformer", TINY + ["--encoder-layers", "4", "--decoder-layers", "4",
                                                  "--encoder-share-strategy", "universal"] + bad)


def test_architectures_default_to_rigid_sharing():
    args = parse_args("transformer_cycle_rev", TINY)
    assert (args.encoder_share_lora_rank, args.decoder_untie_norms, args.decoder_untie_biases) == (
        0, False, False)


# ---- checkpoints -----------------------------------------------------------------------------
RELAXED = dict(rank=3, norms=True, biases=True)


def test_state_dict_stores_each_tied_weight_and_each_delta_once():
    model, _ = tiny(**RELAXED)
    state = model.state_dict()
    markers = {k for k in state if ".sharing_" in k}
    buffers = {k for k, _ in model.named_buffers()}
    stored = {k: v for k, v in state.items() if k not in markers | buffers}
    assert len({v.data_ptr() for v in stored.values()}) == len(stored)  # no tensor twice
    assert sum(v.numel() for v in stored.values()) == sum(p.numel() for p in model.parameters())
    # cycle_rev 1 2 2 1: W_set under the set's first position only; a delta at every position
    assert "encoder.layers.0.fc1.parametrizations.weight.original" in state
    assert "encoder.layers.3.fc1.parametrizations.weight.original" not in state
    for i in range(4):
        assert f"encoder.layers.{i}.fc1.parametrizations.weight.0.lora_A" in state
        assert f"decoder.layers.{i}.fc1.bias" in state  # untied biases and norms
        assert f"decoder.layers.{i}.final_layer_norm.weight" in state
    assert state["decoder.sharing_relaxation_version"].tolist() == [3, 1, 1]
    assert "decoder.sharing_relaxation_version" not in tiny()[0].state_dict()  # rigid: none


def test_checkpoint_round_trips_with_weights_only_loading(tmp_path):
    model, task = tiny(**RELAXED)
    relax_randomly(model)
    path = tmp_path / "relaxed.pt"
    torch.save(model.state_dict(), path)
    assert torch.serialization.get_unsafe_globals_in_checkpoint(str(path)) == []
    fresh, _ = tiny(**RELAXED, seed=7)
    fresh.load_state_dict(torch.load(path, weights_only=True))
    for (n1, p1), (n2, p2) in zip(model.named_parameters(), fresh.named_parameters()):
        assert n1 == n2 and torch.equal(p1, p2), n1
    assert torch.equal(outputs(fresh, task), outputs(model, task))
    assert fresh.encoder.layers[3].fc1.parametrizations.weight.original is (
        fresh.encoder.layers[0].fc1.parametrizations.weight.original)


@pytest.mark.parametrize("target,needle", [
    (dict(), "this model's encoder is cycle_rev M=2 \\(1 2 2 1\\), scope=all\\."),
    (dict(rank=2, norms=True, biases=True),
     "this model's encoder is .*, LoRA rank 2, untied norms"),
    (dict(rank=3, norms=True), "this model's encoder is .*, LoRA rank 3, untied norms\\."),
])
def test_state_of_other_relaxation_is_refused_naming_both_configurations(target, needle):
    saved, _ = tiny(**RELAXED)
    relax_randomly(saved)
    model, _ = tiny(**target, seed=7)
    with pytest.raises(SharingMismatchError) as err:
        model.load_state_dict(saved.state_dict())
    message = str(err.value)
    saved_as = "saved as cycle_rev M=2 (1 2 2 1), scope=all, LoRA rank 3, untied norms, "
    assert saved_as + "untied biases and this model's" in message
    assert re.search(needle, message), message


@pytest.mark.parametrize("saved_cfg,target", [
    (RELAXED, dict(strategy="none", m=None)),  # deltas merged into each layer's own weights
    (RELAXED, dict(strategy="1,2,3,1", m=None, **RELAXED)),  # set 2 split: merged there
    (dict(), RELAXED),  # rigid into relaxed: zero deltas
])
def test_state_loads_exactly_where_it_can(saved_cfg, target):
    saved, task = tiny(**saved_cfg)
    relax_randomly(saved)
    model, _ = tiny(**target, seed=7)
    model.load_state_dict(saved.state_dict())
    torch.testing.assert_close(outputs(model, task), outputs(saved, task), rtol=0, atol=ATOL)
    if not saved_cfg:  # the model's own A stays, B = 0: training can move the deltas
        assert torch.count_nonzero(lora_B(model.encoder.layers[1], "fc1")) == 0
        assert torch.count_nonzero(model.encoder.layers[1].fc1.parametrizations.weight[0].lora_A)


# ---- LayerDrop pruning -----------------------------------------------------------------------
def pruned(flag_list, keep, seed=9):
    from fairseq.tasks.translation import TranslationTask

    args = parse_args("shared_transformer", TINY + flag_list)
    args.encoder_layers_to_keep, args.decoder_layers_to_keep = keep
    d = make_dictionary()
    torch.manual_seed(seed)
    return TranslationTask(args, d, d).build_model(args).eval().double(), args


@pytest.mark.parametrize("keep", [("1,4", "1,4"), ("0,2,4", "0,1,4")])
def test_pruning_keeps_each_kept_positions_delta(keep, tmp_path):
    """cycle_rev 1 2 3 3 2 1: 1,4 keeps set 2 twice (still tied, deltas kept as they are);
    0,2,4 keeps sets 1 3 2 (nothing tied: each delta merged into its layer's weight)."""
    relaxed = flags("cycle_rev", "3", layers=6, **RELAXED)
    full, task = tiny("cycle_rev", "3", layers=6, **RELAXED)
    relax_randomly(full)
    model, args = pruned(relaxed, keep)
    model.load_state_dict(full.state_dict(), model_cfg=args)
    reference = full
    for stack, kept in zip((full.encoder, full.decoder), keep):
        stack.layers = torch.nn.ModuleList([stack.layers[int(i)] for i in kept.split(",")])
    torch.testing.assert_close(outputs(model, task), outputs(reference, task), rtol=0, atol=ATOL)
    if keep[0] == "1,4":
        kept = lora_B(model.encoder.layers[1], "fc1")
        assert torch.equal(kept, lora_B(full.encoder.layers[1], "fc1"))
    else:  # a saved pruned model rebuilds from its own flags and loads again as it was
        assert args.encoder_share_strategy == "1,2,3" and args.encoder_share_lora_rank == 0
        path = tmp_path / "pruned.pt"
        history = [{"criterion_name": "x", "optimizer_name": "x", "lr_scheduler_state": {},
                    "num_updates": 0}]
        torch.save({"args": args, "cfg": None, "model": model.state_dict(),
                    "optimizer_history": history, "extra_state": {}}, path)
        [again], _ = checkpoint_utils.load_model_ensemble([str(path)], task=task)
        again.eval().double()
        torch.testing.assert_close(outputs(again, task), outputs(model, task), rtol=0, atol=ATOL)


# ---- export: deltas merged into a plain fairseq transformer ----------------------------------
def test_full_state_dict_is_a_plain_transformer_computing_the_same(tmp_path):
    model, task = tiny(**RELAXED)
    relax_randomly(model)
    plain_state = model.full_state_dict()
    assert not [k for k in plain_state if "parametrizations" in k or "sharing" in k]
    plain, _ = build_model("transformer", TINY + ["--encoder-layers", "4", "--decoder-layers", "4"])
    plain.load_state_dict(plain_state, strict=True)
    plain.eval().double()
    torch.testing.assert_close(outputs(plain, task), outputs(model, task), rtol=0, atol=ATOL)
    src, lengths, _ = random_batch(task, bsz=3, seed=5)
    from helpers_model import beam_search

    ours = beam_search(model, task, src, lengths, use_cache=True, beam=3)
    theirs = beam_search(plain, task, src, lengths, use_cache=True, beam=3)
    for a, b in zip(ours, theirs):
        assert [h["tokens"].tolist() for h in a] == [h["tokens"].tolist() for h in b]


def test_export_merges_the_deltas_for_fairseq_and_ctranslate2(tmp_path, tmp_path_factory):
    """The real export (python -m fairseq_shared.cli.export): stock fairseq's transformer and
    CTranslate2 find the relaxed model's hypotheses."""
    from fairseq.tasks.translation import TranslationTask

    from fairseq_shared.export.api import export
    from helpers_data import data_bin

    data = data_bin(tmp_path_factory)
    args = parse_args("shared_transformer", TINY + flags(**RELAXED))
    args.data = str(data)
    task = TranslationTask.setup_task(args)
    torch.manual_seed(1)
    model = relax_randomly(task.build_model(args))
    history = [{"criterion_name": "CrossEntropyCriterion", "optimizer_name": "Adam",
                "lr_scheduler_state": {}, "num_updates": 0}]
    path = tmp_path / "relaxed.pt"
    torch.save({"args": args, "cfg": None, "model": model.state_dict(),
                "optimizer_history": history, "extra_state": {}}, path)
    report = export(str(path), str(tmp_path / "out"), ct2=True, data=str(data), sentences=6,
                    max_len_b=9)
    for key in ("fairseq_plain_vs_shared", "ct2_float32_vs_fairseq"):
        assert report["verify"][key]["different"] == 0, report["verify"][key]
        assert report["verify"][key]["identical"] + report["verify"][key]["ties"] == 6
    assert report["lora_merged"] == ["encoder", "decoder"]  # the tables' note on its size
    plain = torch.load(report["plain_checkpoint"], weights_only=True)
    assert not [k for k in plain["model"] if "parametrizations" in k or "sharing" in k]
    assert not [k for k in plain["cfg"]["model"] if "untie" in k or "lora" in k]


# ---- fairseq-train ---------------------------------------------------------------------------
def test_fairseq_train_relaxed_cycle_rev_resumes_from_checkpoint_last(tmp_path, tmp_path_factory):
    from helpers_data import TINY_ARCH, TINY_TRAIN, data_bin, run_tool

    data, save_dir = data_bin(tmp_path_factory), tmp_path / "ckpt"
    relaxation = ["--encoder-share-lora-rank", "4", "--decoder-share-lora-rank", "2",
                  "--decoder-untie-biases"]
    common = [data, *TINY_ARCH, *TINY_TRAIN, *relaxation, "--save-dir", save_dir, "--seed", "1",
              "--no-epoch-checkpoints", "--max-tokens", "700"]
    _, log = run_tool("fairseq-train", *common, "--max-update", "3")
    logged = int(re.search(r"num\. shared model params: ([\d,]+)", log).group(1).replace(",", ""))
    vocab = sum(1 for _ in open(data / "dict.src.txt")) + 4
    cycle_rev = [0, 1, 1, 0]
    rigid = model_params(vocab, vocab, 32, 64, cycle_rev, cycle_rev, share_all_embeddings=True)
    assert logged == rigid + relaxed_extra(cycle_rev, "all", False, 4, d=32, f=64) + (
        relaxed_extra(cycle_rev, "all", True, 2, biases=True, d=32, f=64))

    _, log = run_tool("fairseq-train", *common, "--max-update", "5")
    assert re.search(r"[Ll]oaded checkpoint .*@ 3 updates", log)
    assert re.search(r"num_updates 5\b", log)
    state = torch.load(save_dir / "checkpoint_last.pt", weights_only=True)["model"]
    assert "encoder.layers.3.fc1.parametrizations.weight.original" not in state
    assert torch.count_nonzero(state["encoder.layers.3.fc1.parametrizations.weight.0.lora_B"])
    [model], _ = checkpoint_utils.load_model_ensemble([str(save_dir / "checkpoint_last.pt")])
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, state[name]), name


def test_count_params_reports_the_relaxed_count(capsys):
    from fairseq_shared.cli.count_params import main

    main(["shared_transformer", "transformer_universal_iwslt_de_en", "--vocab", "64",
          "--lora-rank", "2"])
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].endswith("| relaxed, LoRA rank 2 | added |")
    assert rows[2].endswith("| - | - |")  # ties nothing: nothing to relax
    # 6+6 positions of one set at d = 512, f = 1024: 6 * 2 * (8d + 2(d + f) + 16d + 2(d + f))
    assert "(deltas 0.22M, untied norms/biases 0.00M)" in rows[3]
