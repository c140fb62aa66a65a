"""One Wide FFN (Pires et al. 2023; issue 22): the width arithmetic, the registered
translation and language-model families, fairseq-train end to end."""

import argparse

import pytest
import torch

from fairseq_shared.models import lm_architectures
from fairseq_shared.sharing.wide_ffn import ffn_params, one_wide_ffn_width, wide_ffn_width
from helpers_data import TINY_TRAIN, USER_DIR, data_bin, run_tool
from helpers_lm import build_lm, incremental_vs_full as lm_incremental_vs_full, parse_lm_args
from helpers_lm import random_tokens
from helpers_model import build_model, incremental_vs_full, parse_args
from helpers_params import model_params

torch.set_num_threads(1)

count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
# d = 16, no FFN widths: the family computes the encoder's from the size's (2048 at base)
SMALL = ["--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
         "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
         "--encoder-layers", "3", "--decoder-layers", "3", "--share-all-embeddings",
         "--dropout", "0", "--attention-dropout", "0", "--activation-dropout", "0"]


@pytest.mark.parametrize("d,f,layers,width,difference", [
    (512, 2048, 6, 24587, -501),  # base, _wmt_en_de: 24576 + 11776/1025
    (512, 1024, 6, 12299, -501),  # _iwslt_de_en
    (1024, 4096, 6, 49163, -1013),  # _wmt_en_de_big: 49152 + 23552/2049
    (128, 512, 3, 3077, -123),  # the evidence budget: 3072 + 1408/257
])
def test_one_wide_ffn_width_is_the_nearest_to_vanillas_parameters(d, f, layers, width,
                                                                   difference):
    assert one_wide_ffn_width(d, f, layers, d, f, layers) == (width, difference)
    # vanilla's 2L FFNs and L decoder FFN LayerNorms, against one FFN of width F
    replaced = 2 * layers * ffn_params(d, f) + layers * 2 * d
    assert ffn_params(d, width) - replaced == difference
    assert abs(difference) <= (2 * d + 1) / 2  # the nearest: one more or less is farther
    assert abs(ffn_params(d, width + (1 if difference < 0 else -1)) - replaced) > abs(difference)


def test_wide_ffn_width_is_exact_when_the_parameters_allow():
    assert wide_ffn_width(16, ffn_params(16, 100)) == (100, 0)
    assert wide_ffn_width(16, ffn_params(16, 100) + 16) == (100, -16)  # 16 < 33/2
    assert wide_ffn_width(16, ffn_params(16, 100) + 17) == (101, 16)


@pytest.mark.parametrize("size,width", [("", 24587), ("_iwslt_de_en", 12299),
                                        ("_wmt_en_de", 24587), ("_wmt_en_de_big", 49163)])
def test_each_size_widens_the_one_encoder_ffn_and_drops_the_decoders(size, width):
    args = parse_args("transformer_one_wide_ffn" + size)
    assert args.encoder_ffn_embed_dim == width
    assert (args.encoder_share_strategy, args.encoder_share_scope) == ("universal", "ffn")
    assert args.decoder_no_ffn and not args.encoder_no_ffn
    assert args.decoder_share_strategy == "none"
    nodec = parse_args("transformer_one_wide_ffn_nodec" + size)
    assert nodec.decoder_no_ffn and nodec.encoder_share_strategy == "none"
    assert nodec.encoder_ffn_embed_dim == parse_args("transformer" + size).encoder_ffn_embed_dim
    given = parse_args("transformer_one_wide_ffn" + size, ["--encoder-ffn-embed-dim", "99"])
    assert given.encoder_ffn_embed_dim == 99  # an explicit width is the wide FFN's


def test_base_size_has_vanillas_parameters_to_the_stated_difference():
    """Built for real at base size (small vocabulary): 501 fewer than vanilla's 44M+;
    _nodec: vanilla less the decoder's 6 FFNs and their LayerNorms."""
    flags = ["--share-all-embeddings"]
    vanilla = count(build_model("transformer", flags)[0])
    one_wide, _ = build_model("transformer_one_wide_ffn", flags)
    assert count(one_wide) == vanilla - 501
    encoder = one_wide.encoder.layers
    assert encoder[0].fc1.weight.shape == (24587, 512)
    assert all(layer.fc1.weight is encoder[0].fc1.weight for layer in encoder)
    assert all(layer.final_layer_norm.weight is not encoder[0].final_layer_norm.weight
               for layer in encoder[1:])
    assert not [n for n, _ in one_wide.decoder.named_parameters() if ".fc" in n]
    del one_wide
    nodec = count(build_model("transformer_one_wide_ffn_nodec", flags)[0])
    assert vanilla - nodec == 6 * (ffn_params(512, 2048) + 2 * 512) == 12_604_416


def test_evidence_size_one_wide_ffn_has_vanilla_3_3s_parameters_less_123():
    """The evidence budget (d=128, FFN 512, 4 heads, 3+3, pre-LN, the 8k joined vocabulary:
    8,008 symbols with fairseq's specials and padding): vanilla 3+3 has 2,414,080 parameters;
    One Wide FFN at width 3077 has 123 fewer."""
    from fairseq_shared.cli.count_params import build

    common = ["--encoder-embed-dim", "128", "--decoder-embed-dim", "128",
              "--encoder-attention-heads", "4", "--decoder-attention-heads", "4",
              "--encoder-layers", "3", "--decoder-layers", "3",
              "--encoder-normalize-before", "--decoder-normalize-before",
              "--decoder-ffn-embed-dim", "512"]
    vanilla = count(build("shared_transformer", 8008, common + ["--encoder-ffn-embed-dim", "512"]))
    assert vanilla == 2_414_080
    wide = build("transformer_one_wide_ffn", 8008, common + ["--encoder-ffn-embed-dim", "3077"])
    assert count(wide) == vanilla - 123
    # without an explicit width the family's reference is the size's encoder FFN (2048 at
    # base size), not the decoder's given 512: the evidence configuration gives 3077
    computed = build("transformer_one_wide_ffn", 8008, common)
    assert computed.encoder.layers[0].fc1.weight.shape[0] == 7685 == one_wide_ffn_width(
        128, 2048, 3, 128, 512, 3)[0]
    nodec = build("transformer_one_wide_ffn_nodec", 8008,
                  common + ["--encoder-ffn-embed-dim", "512"])
    assert count(nodec) == vanilla - 3 * (ffn_params(128, 512) + 2 * 128) == 2_018_176


def test_the_family_decodes_incrementally_as_in_one_pass_and_counts_in_closed_form():
    model, task = build_model("transformer_one_wide_ffn_iwslt_de_en", SMALL)
    model.eval().double()
    width = model.encoder.layers[0].fc1.weight.shape[0]
    assert width == one_wide_ffn_width(16, 1024, 3, 16, 1024, 3)[0] == 6144 + 176 // 33
    incremental, full, state = incremental_vs_full(model, task)
    torch.testing.assert_close(incremental, full, rtol=0, atol=2e-6)
    assert len(state) == 6
    v = len(task.source_dictionary)
    expected = model_params(v, v, 16, 1024, [0, 0, 0], [0, 1, 2], "ffn", "all",
                            share_all_embeddings=True, decoder_no_ffn=True, encoder_f=width)
    assert count(model) == expected


@pytest.fixture(scope="module")
def trained_one_wide(tmp_path_factory):
    """transformer_one_wide_ffn (2+2 layers, d=16, pre-LN) trained by fairseq-train for 3
    short epochs on the reversal corpus."""
    data, save_dir = data_bin(tmp_path_factory), tmp_path_factory.mktemp("one_wide")
    arch = ["--user-dir", USER_DIR, "--arch", "transformer_one_wide_ffn", "--encoder-layers",
            "2", "--decoder-layers", "2", "--encoder-embed-dim", "16", "--decoder-embed-dim",
            "16", "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
            "--decoder-ffn-embed-dim", "32", "--share-all-embeddings",
            "--encoder-normalize-before", "--decoder-normalize-before", "--dropout", "0"]
    _, output = run_tool("fairseq-train", data, *arch, *TINY_TRAIN, "--max-epoch", "3",
                         "--max-tokens", "700", "--seed", "1", "--save-dir", save_dir)
    return data, save_dir / "checkpoint_last.pt", output


def test_fairseq_train_and_generate_with_the_registered_family(trained_one_wide):
    data, checkpoint, output = trained_one_wide
    assert "decoder: 2 layers over 2 parameter sets, scope=all, layer->set: 1 2, no FFN" in output
    assert "encoder: 2 layers over 1 parameter sets, scope=ffn" in output
    assert "done training" in output
    state = torch.load(checkpoint, weights_only=False)
    # vanilla's encoder FFNs (the size's 2048) and decoder FFNs (32) with their LayerNorms:
    # 2 (2048 x 33 + 16) + 2 (32 x 33 + 16 + 32) = 137408 = 33 F + 16: F = 4163.4
    assert state["model"]["encoder.layers.0.fc1.weight"].shape == (4163, 16)
    _, generated = run_tool("fairseq-generate", data, "--user-dir", USER_DIR, "--path",
                            checkpoint, "--beam", "2", "--cpu",
                            "--batch-size", "4", "--required-batch-size-multiple", "1")
    assert generated.count("\nH-") == 12


def test_trained_family_exports_with_identical_hypotheses(trained_one_wide, tmp_path):
    """The export's own verification on a trained model: the plain fairseq model's and
    CTranslate2's beam search find the shared model's hypotheses on all 12 test sentences."""
    from fairseq_shared.export.api import export

    data, checkpoint, _ = trained_one_wide
    report = export(str(checkpoint), str(tmp_path / "out"), ct2=True, data=str(data),
                    sentences=12)
    assert report["ok"]
    for key in ("fairseq_plain_vs_shared", "ct2_float32_vs_fairseq"):
        assert report["verify"][key]["identical"] == 12, report["verify"][key]


# ---- the language model (issue 22, item 3) ---------------------------------------------
@pytest.mark.parametrize("size,width,layers", [("", 12290, 6), ("_big", 49157, 12),
                                               ("_gpt", 36869, 12)])
def test_lm_family_widens_one_ffn_for_all_layers(size, width, layers):
    args = parse_lm_args("transformer_lm_one_wide_ffn" + size)
    assert (args.decoder_ffn_embed_dim, args.decoder_layers) == (width, layers)
    assert (args.decoder_share_strategy, args.decoder_share_scope) == ("universal", "ffn")
    vanilla = argparse.Namespace()
    lm_architectures.SIZES[size](vanilla)
    d, f = vanilla.decoder_embed_dim, vanilla.decoder_ffn_embed_dim
    assert abs(ffn_params(d, width) - layers * ffn_params(d, f)) <= d + 0.5


def test_lm_family_has_vanilla_lm_parameters_less_510_and_decodes_exactly():
    flags = ["--share-decoder-input-output-embed"]
    # fairseq's transformer_lm is its dataclass's defaults, post-LN; base size (every family
    # of the registry) is base_lm_architecture's, pre-LN with a final LayerNorm
    vanilla = count(build_lm("transformer_lm", flags + ["--decoder-normalize-before"],
                             via_omegaconf=True)[0])
    model, task = build_lm("transformer_lm_one_wide_ffn", flags, via_omegaconf=True)
    assert count(model) == vanilla - 510
    layers = model.decoder.layers
    assert all(layer.fc2.weight is layers[0].fc2.weight for layer in layers)
    small, task = build_lm("transformer_lm_one_wide_ffn", [
        "--decoder-embed-dim", "16", "--decoder-attention-heads", "2", "--decoder-layers", "3",
        "--dropout", "0"])
    small.eval().double()
    tokens = random_tokens(task)
    incremental, full, _ = lm_incremental_vs_full(small, tokens, task.source_dictionary.pad())
    torch.testing.assert_close(incremental, full, rtol=0, atol=2e-6)


def test_lm_takes_the_no_ffn_switch_and_refuses_normformer_ffn_scaling():
    from fairseq_shared.sharing.assignment import SharingConfigError

    model, _ = build_lm("shared_transformer_lm", ["--decoder-layers", "2", "--decoder-no-ffn",
                                                  "--decoder-embed-dim", "16"],
                        via_omegaconf=True)
    assert not [n for n, _ in model.named_parameters() if ".fc" in n]
    with pytest.raises(SharingConfigError, match="--scale-fc: NormFormer's scaling of the FFN"):
        build_lm("shared_transformer_lm", ["--decoder-no-ffn", "--scale-fc"])


# ---- export (issue 22, item 4) ----------------------------------------------------------
ONE_WIDE_PRE_LN = ["--encoder-layers", "3", "--decoder-layers", "3",
                   "--encoder-share-strategy", "universal", "--encoder-share-scope", "ffn",
                   "--encoder-ffn-embed-dim", "70", "--decoder-no-ffn",
                   "--encoder-normalize-before", "--decoder-normalize-before"]


def teacher_forced_log_probs(model, task, ids):
    """fairseq's log-probability of each reference target token (final EOS included)."""
    dataset = task.dataset("test")
    out = []
    with torch.no_grad():
        for i in ids:
            sample = dataset.collater([dataset[i]])
            net, target = sample["net_input"], sample["target"]
            logits = model(net["src_tokens"], net["src_lengths"], net["prev_output_tokens"])[0]
            lprobs = model.get_normalized_probs((logits, None), log_probs=True)
            out.append(lprobs[0].gather(1, target[0][:, None])[:, 0])
    return out


def ct2_teacher_forced_log_probs(model_dir, task, ids):
    """CTranslate2's ``score_batch`` of the same references (it adds the EOS itself)."""
    import ctranslate2

    translator = ctranslate2.Translator(str(model_dir), device="cpu", intra_threads=1)
    d, dataset = task.source_dictionary, task.dataset("test")
    strip = lambda ids: [d[int(t)] for t in ids if int(t) not in (d.pad(), d.eos())]  # noqa
    results = translator.score_batch([strip(dataset[i]["source"]) for i in ids],
                                     [strip(dataset[i]["target"]) for i in ids])
    return [torch.tensor(r.log_probs) for r in results]


@pytest.mark.parametrize("flags", [
    ONE_WIDE_PRE_LN,
    ["--encoder-layers", "2", "--decoder-layers", "3", "--encoder-no-ffn", "--decoder-no-ffn",
     "--decoder-share-strategy", "1,2,1", "--encoder-normalize-before",
     "--decoder-normalize-before"],
], ids=["one_wide_ffn", "no_ffn_anywhere"])
def test_pre_ln_layers_without_ffn_export_exactly_to_fairseq_and_ctranslate2(
        flags, tmp_path, tmp_path_factory):
    """A zero FFN of width 1 in each such layer. Untrained weights, teacher-forced on the 12
    test references: the plain fairseq model's log-probs equal the shared model's bit for
    bit (and its beam search finds the same hypotheses); CTranslate2's agree to float32
    rounding (its beam search on an untrained model's near-uniform outputs is not compared:
    it parts from fairseq's on such models with FFNs as well)."""
    from fairseq_shared.export.api import export, load_plain
    from fairseq_shared.export.plain import load_shared
    from test_export import save_random_checkpoint

    data = data_bin(tmp_path_factory)
    path = save_random_checkpoint(tmp_path / "random.pt", data, flags)
    out = tmp_path / "out"
    report = export(str(path), str(out), ct2=True, data=str(data), sentences=12, max_len_b=9)
    assert report["verify"]["fairseq_plain_vs_shared"]["identical"] == 12
    assert "no FFN" in report["sharing"]["decoder"]
    raw = torch.load(out / "checkpoint.pt", weights_only=True)
    assert raw["cfg"]["model"]["decoder_ffn_embed_dim"] == 1
    assert not [k for k in raw["cfg"]["model"] if k.endswith("no_ffn")]
    assert raw["model"]["decoder.layers.2.fc2.weight"].shape == (16, 1)
    assert not raw["model"]["decoder.layers.2.fc2.weight"].any()

    loaded = load_shared(str(path), str(data))
    plain, task = load_plain(str(out / "checkpoint.pt"), str(out))[0], loaded.task
    task.load_dataset("test")
    ids = list(range(12))
    shared_scores = teacher_forced_log_probs(loaded.model, task, ids)
    for a, b, c in zip(shared_scores, teacher_forced_log_probs(plain, task, ids),
                       ct2_teacher_forced_log_probs(out / "ct2", task, ids)):
        assert torch.equal(a, b)
        torch.testing.assert_close(c, a, rtol=0, atol=1e-4)


def test_post_ln_layers_without_ffn_are_refused_saying_why(tmp_path, tmp_path_factory):
    from fairseq_shared.export.api import export
    from fairseq_shared.export.plain import ExportError
    from test_export import save_random_checkpoint

    data = data_bin(tmp_path_factory)
    path = save_random_checkpoint(tmp_path / "post_ln.pt", data, ["--decoder-no-ffn"])
    with pytest.raises(ExportError) as err:
        export(str(path), str(tmp_path / "out"), data=str(data), sentences=0)
    assert "cannot export a post-LN decoder without FFNs" in str(err.value)
    assert "LayerNorm(x), not x" in str(err.value)


def test_a_checkpoint_without_decoder_ffns_converts_to_another_map_keeping_none(
        tmp_path, tmp_path_factory):
    """convert_sharing keeps the input's --decoder-no-ffn; the converted model's decoder
    layers are the means of the input's (2 of 1 2 2 1 already equal: exact there)."""
    from fairseq_shared.tools.convert_sharing import convert_checkpoint
    from helpers_checkpoint import build_for_data, save_checkpoint

    data = data_bin(tmp_path_factory)
    flags = ["--encoder-layers", "2", "--decoder-layers", "4", "--decoder-no-ffn"]
    args, _, model = build_for_data(data, "shared_transformer", flags)
    path = save_checkpoint(tmp_path / "in.pt", args, model)
    convert_checkpoint(str(path), str(tmp_path / "out.pt"), {
        "decoder_share_strategy": "cycle_rev", "decoder_unique_layers": 2})
    state = torch.load(tmp_path / "out.pt", weights_only=False)
    assert state["cfg"]["model"].decoder_no_ffn
    assert state["model"]["decoder.sharing_no_ffn_version"].item() == 1
    assert not [k for k in state["model"] if k.startswith("decoder.layers.") and ".fc" in k]
    old = dict(model.named_parameters(remove_duplicate=False))
    name = "self_attn.k_proj.weight"
    mean = (old[f"decoder.layers.1.{name}"] + old[f"decoder.layers.2.{name}"]) / 2
    torch.testing.assert_close(state["model"][f"decoder.layers.1.{name}"], mean, rtol=0,
                               atol=1e-7)
