"""SAN (attention-weight sharing between adjacent layers): maths, caches, beam search,
parameters, flag validation, policy conversion."""

import copy

import pytest
import torch
from fairseq.models.transformer import TransformerModel

from fairseq_shared.tools.convert_policy import convert_model
from fairseq_shared.san.attention import FollowerSelfAttention, is_follower
from fairseq_shared.tools.learn_policy import AttentionRecorder
from fairseq_shared.san.policy import PolicyError
from helpers_model import (
    TINY,
    beam_search,
    build_model,
    cached_and_recomputed_beams,
    incremental_vs_full,
    random_batch,
)

torch.set_num_threads(1)

LAYERS = ["--encoder-layers", "2", "--decoder-layers", "6"]
CYCLE_REV = [
    "--decoder-share-strategy", "cycle_rev", "--decoder-unique-layers", "3",
    "--encoder-share-strategy", "cycle_rev", "--encoder-unique-layers", "1",
]
# (self policy, cross policy, cross reuse)
POLICIES = [
    ("1,5", "2,2,2", "output"),
    ("1,5", "2,2,2", "context"),
    ("6", "6", "output"),
    ("2,1,3", "1,1,1,1,2", "context"),
    ("1,1,1,1,1,1", "3,3", "output"),
]


def san_flags(self_p, cross_p, reuse, extra=()):
    return LAYERS + [
        "--san-self-policy", self_p, "--san-cross-policy", cross_p, "--san-cross-reuse", reuse,
        *extra,
    ]


def tiny(flags=(), arch="shared_transformer", seed=1, double=True):
    model, task = build_model(arch, TINY + list(flags), seed=seed)
    model.eval()
    return (model.double() if double else model), task


# ---- the default is fairseq's decoder ---------------------------------------------------


def test_without_san_flags_outputs_equal_fairseq_transformer():
    model, task = tiny(LAYERS)
    stock, _ = build_model("transformer", TINY + LAYERS, seed=7)
    assert type(stock) is TransformerModel
    state = model.state_dict()
    markers = set(state) - set(stock.state_dict())  # the sharing map/scope each state records
    assert all(k.endswith(("sharing_map_version", "sharing_scope_version")) for k in markers)
    stock.load_state_dict({k: v for k, v in state.items() if k not in markers})
    stock.eval().double()
    src, lengths, prev = random_batch(task)
    with torch.no_grad():
        a, ea = model(src, lengths, prev)
        b, eb = stock(src, lengths, prev)
    assert torch.equal(a, b)
    assert torch.equal(ea["attn"][0], eb["attn"][0])
    assert not model.decoder.san_active


# ---- the maths ----------------------------------------------------------------------------


def test_follower_self_attention_is_leader_weights_times_own_values():
    model, task = tiny(san_flags("1,5", "1,1,1,1,1,1", "output"))
    src, lengths, prev = random_batch(task)
    layers = model.decoder.layers
    seen = {}
    hooks = [
        layers[3].self_attn.register_forward_pre_hook(  # fairseq's layer passes query=...
            lambda m, a, kw: seen.__setitem__("x3", kw["query"]), with_kwargs=True
        ),
        layers[3].self_attn.register_forward_hook(lambda m, a, out: seen.__setitem__("y3", out[0])),
    ]
    with AttentionRecorder(model.decoder) as recorder, torch.no_grad():
        model(src, lengths, prev)
        selfs, _ = recorder.pop()
    for h in hooks:
        h.remove()
    w = selfs[1]  # (H, B, T, T) post-softmax weights of layer 2 (the leader)
    assert torch.allclose(w.sum(-1), torch.ones_like(w.sum(-1)))
    attn3 = layers[3].self_attn
    x = seen["x3"]
    T, B, C = x.shape
    H = attn3.num_heads
    v = attn3.v_proj(x).view(T, B, H, C // H)  # T B H d
    ctx = torch.einsum("hbts,sbhd->tbhd", w.to(v), v).reshape(T, B, C)
    torch.testing.assert_close(seen["y3"], attn3.out_proj(ctx), rtol=0, atol=1e-6)
    # follower's own projections: no Q/K
    assert not hasattr(attn3, "q_proj") and not hasattr(attn3, "k_proj")
    assert isinstance(attn3, FollowerSelfAttention)


@pytest.mark.parametrize("reuse", ["output", "context"])
def test_cross_follower_reuses_leader_output(reuse):
    model, task = tiny(san_flags("1,1,1,1,1,1", "2,2,2", reuse))
    src, lengths, prev = random_batch(task)
    layers = model.decoder.layers
    seen = {}
    h = layers[2].encoder_attn.register_forward_hook(lambda m, a, kw, out: seen.__setitem__("y2", out[0]), with_kwargs=True)
    h2 = layers[2].encoder_attn.out_proj.register_forward_pre_hook(lambda m, a: seen.__setitem__("ctx2", a[0]))
    h3 = layers[3].register_forward_hook(lambda m, a, kw, out: seen.__setitem__("out3", out[0]), with_kwargs=True)
    h4 = layers[3].register_forward_pre_hook(lambda m, a, kw: seen.__setitem__("in3", a[0]), with_kwargs=True)
    with torch.no_grad():
        model(src, lengths, prev)
    for hk in (h, h2, h3, h4):
        hk.remove()
    follower = layers[3]
    if reuse == "output":  # a stand-in without parameters (fairseq's layer calls it)
        assert list(follower.encoder_attn.parameters()) == []
        y = seen["y2"]
    else:
        assert [n for n, _ in follower.encoder_attn.named_parameters()] == ["out_proj.weight", "out_proj.bias"]
        y = follower.encoder_attn.out_proj(seen["ctx2"])
    # recompute layer 4 (post-norm) by hand from its input and the reused attention
    x = seen["in3"]
    T = x.size(0)
    mask = torch.triu(torch.full((T, T), float("-inf"), dtype=x.dtype), 1)
    pad = prev.eq(task.target_dictionary.pad())
    # its self-attention is its own (self policy all ones)
    sa, _ = follower.self_attn(x, x, x, key_padding_mask=pad, attn_mask=mask, need_weights=False)
    x = follower.self_attn_layer_norm(x + sa)
    x = follower.encoder_attn_layer_norm(x + y)
    x = follower.final_layer_norm(x + follower.fc2(torch.relu(follower.fc1(x))))
    torch.testing.assert_close(seen["out3"], x, rtol=0, atol=1e-6)


# ---- caches: incremental == full, beam search with cache == recomputation ----------------


@pytest.mark.parametrize("share", [False, True], ids=["no-param-sharing", "cycle_rev"])
@pytest.mark.parametrize("self_p,cross_p,reuse", POLICIES)
def test_incremental_decoding_matches_full_forward(self_p, cross_p, reuse, share):
    model, task = tiny(san_flags(self_p, cross_p, reuse, CYCLE_REV if share else ()))
    incremental, full, state = incremental_vs_full(model, task)
    assert incremental.shape == full.shape
    torch.testing.assert_close(incremental, full, rtol=0, atol=2e-6)
    # followers cache values only (self) or nothing (cross)
    for layer in model.decoder.layers:
        self_buf = layer.self_attn._get_input_buffer(state)
        if is_follower(layer.self_attn):
            assert set(self_buf) == {"prev_value"}
        else:
            assert {"prev_key", "prev_value"} <= set(self_buf)
        if not is_follower(layer.encoder_attn):
            assert "prev_key" in layer.encoder_attn._get_input_buffer(state)
    expected_entries = sum(1 + (not is_follower(l.encoder_attn)) for l in model.decoder.layers)
    assert len(state) == expected_entries


def test_pre_norm_and_encoder_policy_incremental_matches_full():
    flags = san_flags("1,2,3", "2,2,2", "context", [
        "--encoder-normalize-before", "--decoder-normalize-before",
        "--encoder-layers", "3", "--san-encoder-policy", "1,2",
    ])
    model, task = tiny(flags)
    # pre-norm follower: its encoder_attn_layer_norm only fed the query projection it lacks
    assert list(model.decoder.layers[1].encoder_attn_layer_norm.parameters()) == []
    assert not any("layers.1.encoder_attn_layer_norm" in k for k in model.state_dict())
    assert not hasattr(model.encoder.layers[2].self_attn, "q_proj")
    incremental, full, _ = incremental_vs_full(model, task)
    torch.testing.assert_close(incremental, full, rtol=0, atol=2e-6)


@pytest.mark.parametrize("share", [False, True], ids=["no-param-sharing", "cycle_rev"])
@pytest.mark.parametrize("self_p,cross_p,reuse", POLICIES[:4])
def test_beam_search_with_cache_matches_recomputation(self_p, cross_p, reuse, share):
    model, task = tiny(san_flags(self_p, cross_p, reuse, CYCLE_REV if share else ()), seed=3)
    src, lengths, _ = random_batch(task, bsz=4, seed=5)
    for a, b in cached_and_recomputed_beams(model, task, src, lengths):
        assert torch.equal(a["tokens"], b["tokens"])
        torch.testing.assert_close(a["score"], b["score"], rtol=0, atol=1e-5)
        assert a["attention"] is not None  # followers return their leader's alignment


def test_unreordered_value_cache_would_break_beam_search():
    """The check above can fail: reorder the followers' value caches wrongly."""
    model, task = tiny(san_flags("1,5", "2,2,2", "output"), seed=3)
    for layer in model.decoder.layers:
        if is_follower(layer.self_attn):
            right = layer.self_attn.reorder_incremental_state
            layer.self_attn.reorder_incremental_state = (
                lambda state, order, right=right: right(state, order.flip(0))
            )
    src, lengths, _ = random_batch(task, bsz=4, seed=5)
    cached = beam_search(model, task, src, lengths, use_cache=True)
    recomputed = beam_search(model, task, src, lengths, use_cache=False)
    assert any(
        not torch.equal(a["tokens"], b["tokens"]) or abs(float(a["score"] - b["score"])) > 1e-6
        for ha, hb in zip(cached, recomputed)
        for a, b in zip(ha, hb)
    )


# ---- parameters ---------------------------------------------------------------------------


def _layer_param_names(model, i):
    return {n for n, _ in model.decoder.layers[i].named_parameters()}


def test_followers_hold_no_dead_parameters():
    vanilla, _ = tiny(LAYERS)
    for reuse in ("output", "context"):
        model, _ = tiny(san_flags("1,5", "2,2,2", reuse))
        state = model.state_dict()
        for i in range(6):
            names = _layer_param_names(model, i)
            self_follower = i >= 2
            cross_follower = i % 2 == 1
            assert ("self_attn.q_proj.weight" in names) is not self_follower
            assert ("self_attn.k_proj.bias" in names) is not self_follower
            assert "self_attn.v_proj.weight" in names
            for p in ("q_proj", "k_proj", "v_proj"):
                assert (f"encoder_attn.{p}.weight" in names) is not cross_follower
            assert ("encoder_attn.out_proj.weight" in names) is (not cross_follower or reuse == "context")
            for n in names:
                assert f"decoder.layers.{i}.{n}" in state
        assert not any(
            (".self_attn.q_proj" in k and int(k.split(".")[2]) >= 2) for k in state
        )
        d, h = 16, 16 * 16 + 16  # one d x d projection with bias
        saved = 4 * 2 * h + 3 * (3 + (reuse == "output")) * h
        vn = sum(p.numel() for p in vanilla.parameters())
        assert vn - sum(p.numel() for p in model.parameters()) == saved


def test_composes_with_cycle_rev_tying_by_name():
    model, _ = tiny(san_flags("1,5", "2,2,2", "output", CYCLE_REV))
    layers = model.decoder.layers
    # cycle_rev 6 layers / 3 sets: 1 2 3 3 2 1 -> layer 6 ties to layer 1, 5 to 2, 4 to 3
    assert layers[5].self_attn.v_proj.weight is layers[0].self_attn.v_proj.weight
    assert layers[4].fc1.weight is layers[1].fc1.weight
    # layer 2 (leader) owns Q/K; its set partner layer 5 is a follower without them
    assert not hasattr(layers[4].self_attn, "q_proj")
    # layer 4 (follower, set 3) and layer 3 (leader, set 3) share V but only 3 has Q
    assert layers[3].self_attn.v_proj.weight is layers[2].self_attn.v_proj.weight
    # every tied tensor is tied to the same name only
    by_tensor = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        if ".layers." in name:
            by_tensor.setdefault(id(p), set()).add(name.split(".", 3)[3])
    assert all(len(v) == 1 for v in by_tensor.values())
    # state dict round trip through a fresh model
    fresh, _ = tiny(san_flags("1,5", "2,2,2", "output", CYCLE_REV), seed=9)
    fresh.load_state_dict(model.state_dict())
    for (n, a), (_, b) in zip(model.state_dict().items(), fresh.state_dict().items()):
        assert torch.equal(a, b), n


def test_training_step_reaches_leader_qk_through_followers():
    model, task = tiny(san_flags("1,5", "2,2,2", "output"), double=False)
    model.train()
    src, lengths, prev = random_batch(task)
    out, _ = model(src, lengths, prev)
    # loss only through the last layer's path still reaches leader 2's Q/K
    out.sum().backward()
    assert model.decoder.layers[1].self_attn.q_proj.weight.grad.abs().sum() > 0
    assert model.decoder.layers[4].encoder_attn.q_proj.weight.grad.abs().sum() > 0


# ---- flags ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flags,needle",
    [
        (["--san-self-policy", "1,4"], "--san-self-policy"),
        (["--san-cross-policy", "2,0,4"], "--san-cross-policy"),
        (["--san-cross-policy=-1,7"], "--san-cross-policy"),
        (["--san-encoder-policy", "1,1,1"], "--san-encoder-policy"),
        (["--san-cross-policy", "2,2,2", "--no-cross-attention"], "no encoder-decoder attention"),
        (["--san-self-policy", "1,5", "--cross-self-attention"], "--cross-self-attention"),
        (["--san-cross-policy", "2,2,2", "--decoder-layerdrop", "0.1"], "--decoder-layerdrop"),
        (["--san-encoder-policy", "2", "--encoder-layerdrop", "0.1"], "--encoder-layerdrop 0"),
        (["--san-self-policy", "1,5", "--checkpoint-activations"], "--checkpoint-activations"),
    ],
)
def test_bad_policies_stop_with_a_clear_error(flags, needle):
    with pytest.raises(PolicyError) as e:
        tiny(LAYERS + flags)
    assert needle in str(e.value) and "allowed" in str(e.value)


def test_bad_cross_reuse_value_is_refused_by_the_parser():
    with pytest.raises(SystemExit):
        tiny(LAYERS + ["--san-cross-reuse", "before"])


def test_transformer_san_architecture_defaults():
    model, _ = tiny(LAYERS, arch="transformer_san")
    assert model.decoder.san_self_policy == [1, 5]
    assert model.decoder.san_cross_policy == [2, 2, 2]
    assert model.decoder.san_cross_reuse == "output"
    m2, _ = tiny(["--decoder-layers", "3", "--encoder-layers", "1"], arch="transformer_san_iwslt_de_en")
    assert m2.decoder.san_self_policy == [1, 2] and m2.decoder.san_cross_policy == [2, 1]


# ---- changing the policy of a trained model ------------------------------------------------


def test_loading_a_checkpoint_of_another_policy_asks_for_conversion():
    vanilla, _ = tiny(LAYERS)
    san, _ = tiny(san_flags("1,5", "2,2,2", "output"))
    with pytest.raises(ValueError, match="convert_policy"):
        san.load_state_dict(vanilla.state_dict())


def _assert_unchanged_policy_converts_exactly(san, task, extra):
    """Converting to the same policy (1,5 / 2,2,2 / context) gives identical outputs."""
    same, _ = tiny(san_flags("1,5", "2,2,2", "context", extra), seed=11)
    convert_model(san, same)
    src, lengths, prev = random_batch(task)
    with torch.no_grad():
        assert torch.equal(same(src, lengths, prev)[0], san(src, lengths, prev)[0])


@pytest.mark.parametrize("share", [False, True], ids=["no-param-sharing", "cycle_rev"])
def test_convert_policy_round_trip(share):
    extra = CYCLE_REV if share else ()
    vanilla, task = tiny(LAYERS + list(extra), seed=2)
    san, _ = tiny(san_flags("1,5", "2,2,2", "context", extra), seed=5)
    convert_model(vanilla, san)  # vanilla -> SAN: drops Q/K of followers
    for i in range(2, 6):
        assert torch.equal(san.decoder.layers[i].self_attn.v_proj.weight,
                           vanilla.decoder.layers[i].self_attn.v_proj.weight)
    # a layer that stays a leader keeps its own weights, so its output is unchanged
    assert torch.equal(san.decoder.layers[1].self_attn.q_proj.weight,
                       vanilla.decoder.layers[1].self_attn.q_proj.weight)
    other, _ = tiny(san_flags("2,4", "3,3", "output", extra), seed=6)
    convert_model(san, other)  # followers that become leaders copy their old leader's Q/K
    assert torch.equal(other.decoder.layers[2].self_attn.q_proj.weight,
                       san.decoder.layers[1].self_attn.q_proj.weight)
    back, _ = tiny(LAYERS + list(extra), seed=8)
    convert_model(san, back)
    incremental, full, _ = incremental_vs_full(back, task)
    torch.testing.assert_close(incremental, full, rtol=0, atol=2e-6)
    _assert_unchanged_policy_converts_exactly(san, task, extra)


def _perturb_deltas(model, seed=3):
    """Non-zero B of every low-rank delta, so that merged weights differ from W_set."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("lora_B"):
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.1)


def test_convert_policy_moves_relaxed_weights_between_tied_and_untied_layouts():
    extra = CYCLE_REV + ["--decoder-share-lora-rank", "2"]
    san, task = tiny(san_flags("1,5", "2,2,2", "context", extra), seed=5)
    _perturb_deltas(san)
    # layer 0's cross out_proj is tied to layer 5's (same set, both keep it under "context")
    old_out = san.decoder.layers[0].encoder_attn.out_proj.weight.detach().clone()
    assert hasattr(san.decoder.layers[0].encoder_attn.out_proj, "parametrizations")
    # under "output" reuse layer 5 follows and has no out_proj: layer 0's is untied, plain
    other, _ = tiny(san_flags("2,4", "3,3", "output", extra), seed=6)
    convert_model(san, other)
    out_proj = other.decoder.layers[0].encoder_attn.out_proj
    assert not hasattr(out_proj, "parametrizations")
    assert torch.equal(out_proj.weight, old_out)  # W_set + B A of the old layer, merged
    # and back: a relaxed weight started from a plain one computes the same (B = 0)
    again, _ = tiny(san_flags("1,5", "2,2,2", "context", extra), seed=7)
    convert_model(other, again)
    assert torch.equal(again.decoder.layers[0].encoder_attn.out_proj.weight, old_out)
    incremental, full, _ = incremental_vs_full(again, task)
    torch.testing.assert_close(incremental, full, rtol=0, atol=2e-6)
    _assert_unchanged_policy_converts_exactly(san, task, extra)  # every delta kept


def test_collect_attention_records_every_layer():
    model, task = tiny(san_flags("1,5", "2,2,2", "output"))
    src, lengths, prev = random_batch(task)
    with AttentionRecorder(model.decoder) as recorder, torch.no_grad():
        recorded, _ = model(src, lengths, prev)
        selfs, crosses = recorder.pop()
    assert len(selfs) == len(crosses) == 6
    assert selfs[0].shape == (2, 3, 6, 6) and crosses[0].shape == (2, 3, 6, 7)
    assert torch.equal(selfs[2], selfs[1]) and not torch.equal(selfs[0], selfs[1])
    assert torch.equal(crosses[1], crosses[0]) and not torch.equal(crosses[2], crosses[0])
    # collecting does not change the outputs, and leaves no hook behind
    with torch.no_grad():
        again, _ = model(src, lengths, prev)
    torch.testing.assert_close(recorded, again, rtol=0, atol=2e-6)  # fused vs fairseq path
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def test_learn_policy_accumulator_on_recorded_attention():
    from fairseq_shared.tools.learn_policy import SimilarityAccumulator, learn

    model, task = tiny(san_flags("1,5", "2,2,2", "output"))
    src, lengths, prev = random_batch(task)
    with AttentionRecorder(model.decoder) as recorder, torch.no_grad():
        model(src, lengths, prev)
        selfs, crosses = recorder.pop()
    acc = SimilarityAccumulator(6)
    acc.add_batch(selfs, crosses, prev.ne(task.target_dictionary.pad()))
    js = acc.js()
    assert set(js) == {"self_per_head", "self_head_avg", "cross_per_head", "cross_head_avg"}
    # followers' distributions are their leader's: JS 0 inside blocks, > 0 across
    assert float(js["self_per_head"][1:, 1:].max()) < 1e-9
    assert float(js["self_per_head"][0, 1]) > 1e-3
    assert float(js["cross_per_head"][0, 1]) < 1e-9 and float(js["cross_per_head"][1, 2]) > 1e-3
    # so a threshold just below 1 recovers exactly the trained policy
    assert learn(js, 1 - 1e-9) == {"self": [1, 5], "cross": [2, 2, 2]}
    assert learn(js, 1.0) == {"self": [1] * 6, "cross": [1] * 6}


def test_learn_policy_sweep_lists_every_threshold_and_similarity():
    from fairseq_shared.tools.learn_policy import format_sweep, sweep

    # self: layers 2-3 identical per head, 1 far; head averages make 1-3 close too
    js = {
        "self_per_head": torch.tensor([[0.0, 0.5, 0.5], [0.5, 0.0, 0.0], [0.5, 0.0, 0.0]]),
        "self_head_avg": torch.tensor([[0.0, 0.05, 0.05], [0.05, 0.0, 0.0], [0.05, 0.0, 0.0]]),
        "cross_per_head": torch.tensor([[0.0, 0.3, 0.6], [0.3, 0.0, 0.3], [0.6, 0.3, 0.0]]),
        "cross_head_avg": torch.tensor([[0.0, 0.3, 0.6], [0.3, 0.0, 0.3], [0.6, 0.3, 0.0]]),
    }
    table = sweep(js, [0.4, 0.6, 0.9])
    assert table["per_head"]["0.9"] == {"self": "1,2", "cross": "1,1,1"}
    assert table["head_avg"]["0.9"] == {"self": "3", "cross": "1,1,1"}
    # cross 1-3 block: mean similarity (0.7 + 0.4 + 0.7) / 3 = 0.6 is not > 0.6
    assert table["per_head"]["0.6"]["cross"] == "2,1"
    assert table["per_head"]["0.4"]["cross"] == "3"
    md = format_sweep(table)
    assert md.count("\n") == 1 + 6 and "| head_avg | 0.9 | 3 | 1,1,1 |" in md


def test_transformer_san_family_is_registered_in_every_size():
    from fairseq.models import ARCH_MODEL_REGISTRY, ARCH_CONFIG_REGISTRY
    from helpers_model import parse_args

    for suffix, dim in (("", 512), ("_iwslt_de_en", 512), ("_wmt_en_de", 512), ("_wmt_en_de_big", 1024)):
        name = "transformer_san" + suffix
        assert ARCH_MODEL_REGISTRY[name].__name__ == "SharedTransformerModel"
        args = parse_args(name)
        assert args.decoder_embed_dim == dim
        assert (args.san_self_policy, args.san_cross_policy, args.san_cross_reuse) == ("1,5", "2,2,2", "output")
    # composes with a parameter-sharing strategy in one model
    args = parse_args("transformer_cycle_rev", ["--san-self-policy", "1,11", "--san-cross-policy", "2,2,2,2,2,2"])
    assert args.decoder_layers == 12 and args.decoder_share_strategy == "cycle_rev"
