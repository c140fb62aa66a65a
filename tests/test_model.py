"""The shared model: caches per position, ties by name, parameter counts, state dicts."""

import io
import itertools

import pytest
import torch

from fairseq_shared.models.shared_transformer import SharedTransformerModel
from helpers_params import model_params
from fairseq_shared.sharing.assignment import SharingConfigError
from helpers_model import (
    TINY,
    beam_search,
    build_model,
    cached_and_recomputed_beams,
    incremental_vs_full,
    random_batch,
)

torch.set_num_threads(1)

STRATEGIES = [
    ("none", None),
    ("sequence", "2"),
    ("cycle", "2"),
    ("cycle_rev", "2"),
    ("universal", None),
    ("1,2,2,1", None),
]
SCOPES = ["all", "attn", "ffn"]


def sharing_flags(strategy, m, scope, layers=4):
    flags = ["--encoder-layers", str(layers), "--decoder-layers", str(layers)]
    for stack in ("encoder", "decoder"):
        flags += [f"--{stack}-share-strategy", strategy, f"--{stack}-share-scope", scope]
        if m is not None:
            flags += [f"--{stack}-unique-layers", m]
    return flags


def tiny(strategy="cycle_rev", m="2", scope="all", extra=(), arch="shared_transformer", seed=1):
    model, task = build_model(arch, TINY + sharing_flags(strategy, m, scope) + list(extra), seed=seed)
    model.eval()
    return model.double(), task


@pytest.mark.parametrize("strategy,m", STRATEGIES)
@pytest.mark.parametrize("scope", SCOPES)
def test_incremental_decoding_matches_full_forward(strategy, m, scope):
    model, task = tiny(strategy, m, scope)
    incremental, full, state = incremental_vs_full(model, task)
    assert incremental.shape == full.shape
    # fairseq's attention softmax runs in float32 even for a float64 model: ~1e-7 noise;
    # a wrong cache shows up as differences of order 1e-1.
    torch.testing.assert_close(incremental, full, rtol=0, atol=2e-6)
    # one cache entry per attention object and position: 4 decoder layers x 2 attentions
    assert len(state) == 8


@pytest.mark.parametrize("strategy,m", STRATEGIES)
@pytest.mark.parametrize("scope", ["all", "attn"])
def test_beam_search_with_cache_matches_recomputation(strategy, m, scope):
    model, task = tiny(strategy, m, scope, seed=3)
    src, lengths, _ = random_batch(task, bsz=4, seed=5)
    for a, b in cached_and_recomputed_beams(model, task, src, lengths):
        assert torch.equal(a["tokens"], b["tokens"])
        torch.testing.assert_close(a["score"], b["score"], rtol=0, atol=1e-5)


def test_reusing_one_layer_object_breaks_the_cache_check():
    """The failure the tests above guard against: one layer object at two depths."""
    model, task = tiny("none", None)
    model.decoder.layers[2] = model.decoder.layers[1]
    src, lengths, _ = random_batch(task, bsz=4, seed=5)
    cached = beam_search(model, task, src, lengths, use_cache=True)
    recomputed = beam_search(model, task, src, lengths, use_cache=False)
    differs = any(
        not torch.equal(a["tokens"], b["tokens"]) or abs(float(a["score"] - b["score"])) > 1e-6
        for ha, hb in zip(cached, recomputed)
        for a, b in zip(ha, hb)
    )
    assert differs


@pytest.mark.parametrize("strategy,m", STRATEGIES)
@pytest.mark.parametrize("scope", SCOPES)
def test_each_parameter_is_tied_only_to_its_same_named_parameter(strategy, m, scope):
    model, _ = tiny(strategy, m, scope)
    names_by_tensor = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        if ".layers." in name:
            stack, _, rest = name.partition(".layers.")
            _, _, within_layer = rest.partition(".")
            names_by_tensor.setdefault(id(p), set()).add((stack, within_layer))
    for names in names_by_tensor.values():
        assert len(names) == 1, names
    # the authors' bug: encoder-attention q/k/v bias tied to self-attention bias
    for layer in model.decoder.layers:
        assert layer.encoder_attn.q_proj.bias is not model.decoder.layers[0].self_attn.q_proj.bias


def test_tied_layers_keep_their_own_attention_objects():
    model, _ = tiny("universal", None)
    attn = [layer.self_attn for layer in model.decoder.layers]
    assert len({id(a) for a in attn}) == len(attn)
    assert len({id(a._incremental_state_id) for a in attn}) == len(attn)
    assert all(a.q_proj.weight is attn[0].q_proj.weight for a in attn)


def test_training_step_keeps_tied_parameters_tied():
    model, task = tiny("cycle_rev", "2", "all")
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    src, lengths, prev = random_batch(task)
    model(src, lengths, prev)[0].sum().backward()
    opt.step()
    for layer_a, layer_b in [(0, 3), (1, 2)]:
        a, b = model.decoder.layers[layer_a], model.decoder.layers[layer_b]
        assert torch.equal(a.fc1.weight, b.fc1.weight)
        assert a.fc1.weight is b.fc1.weight


@pytest.mark.parametrize(
    "strategy,m,scope",
    [(s, m, sc) for (s, m), sc in itertools.product(STRATEGIES, SCOPES)],
)
@pytest.mark.parametrize("share_all", [True, False])
def test_unique_parameter_count_matches_closed_form(strategy, m, scope, share_all):
    extra = ["--share-all-embeddings"] if share_all else []
    model, task = tiny(strategy, m, scope, extra=extra)
    counted = sum(p.numel() for p in model.parameters())
    expected = model_params(
        len(task.source_dictionary),
        len(task.target_dictionary),
        16,
        24,
        model.sharing["encoder"].assignment,
        model.sharing["decoder"].assignment,
        scope,
        scope,
        share_all_embeddings=share_all,
    )
    assert counted == expected


def test_cycle_rev_12_over_6_has_exactly_the_parameters_of_vanilla_6():
    flags = ["--share-all-embeddings"]
    shared, _ = build_model("transformer_cycle_rev", flags)
    vanilla, _ = build_model("transformer", flags)
    assert len(shared.decoder.layers) == 12 and len(vanilla.decoder.layers) == 6
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(shared) == count(vanilla)


#: issue 35: a deep shared encoder under a shallow decoder, 12 layers over 6 sets by cycle_rev
#: and 1 decoder layer (the budget's cycle_rev_4L_dec1), from the existing flags
DEEP_SHARED_ENCODER = ["--encoder-layers", "12", "--encoder-share-strategy", "cycle_rev",
                       "--encoder-unique-layers", "6", "--decoder-layers", "1"]


def deep_shared_encoder(seed=1, extra=()):
    model, task = build_model("shared_transformer", TINY + DEEP_SHARED_ENCODER + list(extra),
                              seed=seed)
    return model.eval().double(), task


def test_deep_shared_encoder_shallow_decoder_decodes_incrementally_as_the_full_pass():
    model, task = deep_shared_encoder()
    assert model.sharing["encoder"].assignment == [0, 1, 2, 3, 4, 5, 5, 4, 3, 2, 1, 0]
    incremental, full, state = incremental_vs_full(model, task)
    torch.testing.assert_close(incremental, full, rtol=0, atol=2e-6)
    assert len(state) == 2  # 1 decoder layer x 2 attentions
    src, lengths, _ = random_batch(task, bsz=4, seed=5)
    for a, b in cached_and_recomputed_beams(model, task, src, lengths):
        assert torch.equal(a["tokens"], b["tokens"])


def test_deep_shared_encoder_has_exactly_the_parameters_of_vanilla_6_plus_1():
    model, task = deep_shared_encoder(extra=["--share-all-embeddings"])
    vanilla, _ = build_model("shared_transformer", TINY + [
        "--encoder-layers", "6", "--decoder-layers", "1", "--share-all-embeddings"])
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert len(model.encoder.layers) == 12 and len(vanilla.encoder.layers) == 6
    assert count(model) == count(vanilla) == model_params(
        len(task.source_dictionary), len(task.target_dictionary), 16, 24,
        model.sharing["encoder"].assignment, model.sharing["decoder"].assignment,
        share_all_embeddings=True)


def test_deep_shared_encoder_round_trips_bit_exact():
    model, _ = deep_shared_encoder()
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    fresh, _ = deep_shared_encoder(seed=99)
    fresh.load_state_dict(torch.load(buffer))
    for (n1, p1), (n2, p2) in zip(model.named_parameters(remove_duplicate=False),
                                  fresh.named_parameters(remove_duplicate=False)):
        assert n1 == n2 and torch.equal(p1, p2)
    assert fresh.encoder.layers[11].fc1.weight is fresh.encoder.layers[0].fc1.weight


def test_state_dict_stores_each_tied_tensor_once_and_round_trips_bit_exact():
    model, _ = tiny("cycle_rev", "2", "all")
    state = model.state_dict()
    assert not set(model.tied_aliases) & set(state)
    unique_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    buffer = io.BytesIO()
    torch.save(state, buffer)
    unique_only = io.BytesIO()  # the same tensors, no names: the floor a file can reach
    torch.save([p.detach() for p in model.parameters()] + list(model.buffers()), unique_only)
    assert buffer.tell() < unique_only.tell() * 1.05
    untied = io.BytesIO()
    torch.save(tiny("none", None)[0].state_dict(), untied)
    assert buffer.tell() < 0.8 * untied.tell()
    # a tied tensor moved device-by-device (as fairseq's save path does) is still stored once
    stored_bytes = sum(v.numel() * v.element_size() for v in state.values())
    assert stored_bytes <= unique_bytes + 1024

    fresh, _ = tiny("cycle_rev", "2", "all", seed=99)
    assert not torch.equal(fresh.decoder.layers[0].fc1.weight, model.decoder.layers[0].fc1.weight)
    buffer.seek(0)
    fresh.load_state_dict(torch.load(buffer))
    for (n1, p1), (n2, p2) in zip(
        model.named_parameters(remove_duplicate=False), fresh.named_parameters(remove_duplicate=False)
    ):
        assert n1 == n2 and torch.equal(p1, p2)
    assert fresh.decoder.layers[3].fc1.weight is fresh.decoder.layers[0].fc1.weight


def test_loading_a_state_dict_whose_tied_copies_disagree_is_refused():
    model, _ = tiny("cycle_rev", "2", "all")
    untied, _ = tiny("none", None)
    with pytest.raises(ValueError, match="different values for tied parameters"):
        model.load_state_dict(untied.state_dict())


@pytest.mark.parametrize(
    "flags,needle",
    [
        (["--decoder-share-strategy", "cycle", "--decoder-unique-layers", "0"], "--decoder-unique-layers"),
        (["--encoder-share-strategy", "spiral"], "--encoder-share-strategy: unknown strategy"),
        (["--encoder-share-scope", "norms"], "allowed: all, attn, ffn"),
        (["--decoder-share-strategy", "1,2,3"], "has 3 entries but the stack has 4 layers"),
    ],
)
def test_bad_flags_fail_before_building(flags, needle):
    base = ["--encoder-layers", "4", "--decoder-layers", "4"]
    with pytest.raises(SharingConfigError, match=needle):
        build_model("shared_transformer", TINY + base + flags)


def test_architecture_defaults_follow_the_papers():
    model, _ = build_model("transformer_cycle_rev_iwslt_de_en", TINY)
    assert isinstance(model, SharedTransformerModel)
    assert model.sharing["encoder"].assignment == [0, 1, 2, 3, 4, 5, 5, 4, 3, 2, 1, 0]
    attn, _ = build_model("transformer_attn_shared", TINY)
    layers = attn.encoder.layers
    assert layers[5].self_attn.k_proj.weight is layers[0].self_attn.k_proj.weight
    assert layers[5].fc1.weight is not layers[0].fc1.weight
    override, _ = build_model(
        "transformer_sequence", TINY + ["--decoder-layers", "6", "--decoder-unique-layers", "3"]
    )
    assert override.sharing["decoder"].assignment == [0, 0, 1, 1, 2, 2]


REGISTERED = {"shared_transformer"} | {
    family + size
    for family in (
        "transformer_sequence",
        "transformer_cycle",
        "transformer_cycle_rev",
        "transformer_universal",
        "transformer_attn_shared",
        "transformer_san",
        "transformer_one_wide_ffn",
        "transformer_one_wide_ffn_nodec",
    )
    for size in ("", "_iwslt_de_en", "_wmt_en_de", "_wmt_en_de_big")
}


def test_registry_holds_exactly_the_same_names_each_a_findable_function():
    import inspect

    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

    from fairseq_shared.models import architectures

    ours = {n for n, m in ARCH_MODEL_REGISTRY.items() if m is SharedTransformerModel}
    assert ours == REGISTERED and len(ours) == 33
    source = inspect.getsource(architectures)
    for name in ours:  # grep "def NAME" finds every registered architecture
        assert f"\ndef {name}(args):" in source, name
        assert ARCH_CONFIG_REGISTRY[name] is getattr(architectures, name)


# ---- loading across sharing configurations (issue 10, item 4) ---------------------------
from fairseq_shared.sharing.assignment import SharingMismatchError  # noqa: E402


def _decoder_out(model, task):
    src, lengths, prev = random_batch(task, seed=11)
    with torch.no_grad():
        return model(src, lengths, prev)[0]


def test_state_dict_records_each_stacks_map_and_scope():
    model, _ = tiny("cycle_rev", "2", "attn")
    state = model.state_dict()
    assert state["encoder.sharing_map_version"].tolist() == [0, 1, 1, 0]
    assert state["decoder.sharing_scope_version"].item() == 1  # SCOPES.index("attn")


def test_cycle_rev_state_into_a_cycle_model_is_refused_naming_both_configurations():
    """The silent --finetune-from-model failure: both store only set owners 0 and 1."""
    saved, _ = tiny("cycle_rev", "2")
    model, _ = tiny("cycle", "2", seed=2)
    with pytest.raises(SharingMismatchError) as err:
        model.load_state_dict(saved.state_dict())
    message = str(err.value)
    assert "saved as cycle_rev M=2 (1 2 2 1), scope=all" in message
    assert "this model's encoder is cycle M=2 (1 2 1 2), scope=all" in message


@pytest.mark.parametrize(
    "target",
    [("none", None, "all"), ("cycle_rev", "2", "attn"), ("cycle_rev", "2", "ffn"),
     ("1,2,3,1", None, "all")],
)
def test_state_loads_exactly_into_a_model_that_ties_less(target):
    """Every tie of the target is a tie of the saved model: the same function, exactly."""
    saved, task = tiny("cycle_rev", "2", "all")
    model, _ = tiny(*target, seed=7)
    model.load_state_dict(saved.state_dict())
    assert torch.equal(_decoder_out(model, task), _decoder_out(saved, task))


@pytest.mark.parametrize(
    "saved_cfg,target",
    [(("cycle_rev", "2", "attn"), ("cycle_rev", "2", "all")),  # FFN not tied when saved
     (("cycle_rev", "2", "attn"), ("cycle_rev", "2", "ffn")),
     (("none", None, "all"), ("universal", None, "all")),
     (("sequence", "2", "all"), ("cycle_rev", "2", "all"))],
)
def test_state_that_would_change_the_function_is_refused(saved_cfg, target):
    saved, _ = tiny(*saved_cfg)
    model, _ = tiny(*target, seed=7)
    with pytest.raises(SharingMismatchError, match="saved as .* and this model's"):
        model.load_state_dict(saved.state_dict())


def test_state_of_another_depth_is_refused_naming_both_depths():
    saved, _ = tiny("cycle_rev", "2")
    model, _ = build_model("shared_transformer", TINY + sharing_flags("cycle_rev", "3", "all", layers=6))
    with pytest.raises(SharingMismatchError, match=r"\(4 layers\) into this model's encoder.*\(6 layers"):
        model.load_state_dict(saved.state_dict())


def test_state_without_markers_loads_as_this_configuration_with_a_warning(caplog):
    saved, task = tiny("cycle_rev", "2")
    legacy = {k: v for k, v in saved.state_dict().items() if "sharing_" not in k}
    model, _ = tiny("cycle_rev", "2", seed=7)
    with caplog.at_level("WARNING"):
        model.load_state_dict(legacy)
    assert "records no sharing map" in caplog.text
    assert torch.equal(_decoder_out(model, task), _decoder_out(saved, task))


def test_finetune_from_model_refuses_a_checkpoint_of_another_map(tmp_path_factory):
    """The real path: fairseq-train --finetune-from-model builds the model from the current
    flags (cycle) and loads a cycle_rev checkpoint, which stores the same owner keys."""
    from helpers_data import TINY_ARCH, TINY_TRAIN, data_bin, run_tool, trained_checkpoints

    checkpoint = trained_checkpoints(tmp_path_factory) / "checkpoint_last.pt"
    cycle = [a if a != "transformer_cycle_rev" else "transformer_cycle" for a in TINY_ARCH]
    code, output = run_tool(
        "fairseq-train", data_bin(tmp_path_factory), *cycle, *TINY_TRAIN, "--max-update", "1",
        "--finetune-from-model", checkpoint, "--save-dir", tmp_path_factory.mktemp("ft"),
        check=False,
    )
    assert code != 0
    assert "SharingMismatchError" in output
    assert "saved as cycle_rev M=2 (1 2 2 1), scope=all and this model's encoder is cycle M=2 (1 2 1 2)" in output


# ---- layers without their FFN sub-layer (--{stack}-no-ffn; issue 22, item 1) -------------
PRE_LN = ["--encoder-normalize-before", "--decoder-normalize-before"]
NO_FFN = {"decoder": ["--decoder-no-ffn"], "both": ["--encoder-no-ffn", "--decoder-no-ffn"]}


@pytest.mark.parametrize("strategy,m", STRATEGIES)
@pytest.mark.parametrize("scope", ["all", "attn"])
@pytest.mark.parametrize("norm", [[], PRE_LN], ids=["post_ln", "pre_ln"])
def test_incremental_decoding_matches_full_forward_without_ffns(strategy, m, scope, norm):
    model, task = tiny(strategy, m, scope, extra=NO_FFN["both"] + norm)
    assert not any(hasattr(layer.fc1, "weight") for layer in model.decoder.layers)
    incremental, full, state = incremental_vs_full(model, task)
    torch.testing.assert_close(incremental, full, rtol=0, atol=2e-6)
    assert len(state) == 8


@pytest.mark.parametrize("strategy,m", [("none", None), ("cycle_rev", "2"), ("universal", None)])
def test_beam_search_with_cache_matches_recomputation_without_decoder_ffns(strategy, m):
    model, task = tiny(strategy, m, "all", extra=NO_FFN["decoder"] + PRE_LN, seed=3)
    src, lengths, _ = random_batch(task, bsz=4, seed=5)
    for a, b in cached_and_recomputed_beams(model, task, src, lengths):
        assert torch.equal(a["tokens"], b["tokens"])
        torch.testing.assert_close(a["score"], b["score"], rtol=0, atol=1e-5)


def test_a_layer_without_ffn_is_its_attention_sublayers_exactly():
    """The FFN sub-layer adds an exact zero: the no-FFN model equals, bit for bit, the same
    weights in fairseq's own layers with the FFN's output projection zeroed (pre-LN)."""
    model, task = tiny("none", None, extra=NO_FFN["decoder"] + PRE_LN)
    plain, _ = tiny("none", None, extra=PRE_LN)
    plain.load_state_dict({k: v for k, v in model.state_dict().items() if "sharing" not in k},
                          strict=False)
    for layer in plain.decoder.layers:
        torch.nn.init.zeros_(layer.fc2.weight), torch.nn.init.zeros_(layer.fc2.bias)
    assert torch.equal(_decoder_out(model, task), _decoder_out(plain, task))


@pytest.mark.parametrize("strategy,m", STRATEGIES)
@pytest.mark.parametrize("scope", ["all", "attn"])
@pytest.mark.parametrize("which", ["decoder", "both"])
def test_unique_parameter_count_without_ffns_matches_closed_form(strategy, m, scope, which):
    model, task = tiny(strategy, m, scope, extra=NO_FFN[which] + ["--share-all-embeddings"])
    expected = model_params(
        len(task.source_dictionary), len(task.target_dictionary), 16, 24,
        model.sharing["encoder"].assignment, model.sharing["decoder"].assignment, scope, scope,
        share_all_embeddings=True, encoder_no_ffn=which == "both", decoder_no_ffn=True,
    )
    assert sum(p.numel() for p in model.parameters()) == expected
    # what dropping removes: fc1 + fc2 + their LayerNorm of each set (scope all ties all
    # three) or of each of the 4 layers (scope attn ties none), in each stack without FFN
    with_ffn, _ = tiny(strategy, m, scope, extra=["--share-all-embeddings"])
    dropped = sum(p.numel() for p in with_ffn.parameters()) - expected
    units = {"all": model.sharing["decoder"].num_sets, "attn": 4}[scope]
    stacks = 1 if which == "decoder" else 2
    assert dropped == stacks * units * ((16 * 24 + 24) + (24 * 16 + 16) + 2 * 16)


def test_no_ffn_state_dict_round_trips_with_its_marker():
    model, task = tiny("cycle_rev", "2", "all", extra=NO_FFN["decoder"] + PRE_LN)
    state = model.state_dict()
    assert state["decoder.sharing_no_ffn_version"].item() == 1
    assert "encoder.sharing_no_ffn_version" not in state
    assert not [k for k in state if k.startswith("decoder.layers.") and ".fc" in k]
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    fresh, _ = tiny("cycle_rev", "2", "all", extra=NO_FFN["decoder"] + PRE_LN, seed=9)
    fresh.load_state_dict(torch.load(buffer))
    assert torch.equal(_decoder_out(fresh, task), _decoder_out(model, task))
    # into a model that ties less (no sharing), still without FFNs: the same function
    untied, _ = tiny("none", None, "all", extra=NO_FFN["decoder"] + PRE_LN, seed=9)
    untied.load_state_dict(state)
    assert torch.equal(_decoder_out(untied, task), _decoder_out(model, task))


@pytest.mark.parametrize("saved_extra,target_extra,needle", [
    (NO_FFN["decoder"], [], "the saved layers have no FFN weights for this model's FFNs"),
    ([], NO_FFN["decoder"], "this model's layers have no FFN for the saved FFN weights"),
])
def test_state_with_and_without_ffns_do_not_load_into_each_other(saved_extra, target_extra,
                                                                 needle):
    saved, _ = tiny("cycle_rev", "2", "all", extra=saved_extra)
    model, _ = tiny("cycle_rev", "2", "all", extra=target_extra, seed=7)
    with pytest.raises(SharingMismatchError) as err:
        model.load_state_dict(saved.state_dict())
    assert needle in str(err.value)
    assert "cycle_rev M=2 (1 2 2 1), scope=all, no FFN" in str(err.value)
    # a state without markers (a plain fairseq transformer's) is read from its keys
    legacy = {k: v for k, v in saved.state_dict().items() if "sharing_" not in k}
    with pytest.raises(SharingMismatchError, match=needle):
        model.load_state_dict(legacy)


@pytest.mark.parametrize("flags,needle", [
    (["--decoder-no-ffn", "--decoder-share-scope", "ffn"],
     "--decoder-share-scope ffn: the decoder has no FFN (--decoder-no-ffn), so there is "
     "nothing to tie; allowed: all or attn"),
    (["--encoder-no-ffn", "--encoder-share-strategy", "universal", "--encoder-share-scope",
      "ffn", "--encoder-share-lora-rank", "2"],
     "nothing to tie nor for --encoder-share-lora-rank 2 to relax; allowed: all or attn"),
])
def test_a_scope_or_lora_on_an_ffn_the_stack_does_not_have_is_refused(flags, needle):
    base = ["--encoder-layers", "4", "--decoder-layers", "4"]
    with pytest.raises(SharingConfigError) as err:
        build_model("shared_transformer", TINY + base + flags)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_lora_on_a_no_ffn_stack_relaxes_its_attention_only():
    from fairseq_shared.sharing.lora import delta_parameter_count

    model, task = tiny("universal", None, "all", extra=NO_FFN["decoder"] + [
        "--decoder-share-lora-rank", "2"])
    # each of the 4 positions of the set, on its 8 attention projections: B (16x2) + A (2x16);
    # no delta on an FFN
    assert delta_parameter_count(model.decoder) == 4 * 8 * (16 * 2 + 2 * 16)
    incremental, full, _ = incremental_vs_full(model, task)
    torch.testing.assert_close(incremental, full, rtol=0, atol=2e-6)
