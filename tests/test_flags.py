"""Tool flags are validated up front, with a one-line error naming the flag and the allowed
range: similarity thresholds, counts, budget values (--set), LoRA ranks against the layers'
width, and SAN policies parsed as strictly as sharing patterns."""

import json
import re

import pytest

from fairseq_shared.cli import count_params, learn_policy, learn_sharing, learn_to_share
from fairseq_shared.cli import time_generate
from fairseq_shared.cli.arg_types import unit_interval
from harness.configs import BUDGETS, load_budget
from fairseq_shared.san.policy import PolicyError, parse_policy
from fairseq_shared.sharing.assignment import (
    SharingConfigError,
    comma_separated_ints,
    parse_pattern,
)
from helpers_model import TINY, build_model


def _usage_error(main, argv, capsys):
    """``main(argv)`` stops while parsing (exit 2) with argparse's one error line."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    errors = [l for l in capsys.readouterr().err.splitlines() if ": error: " in l]
    assert len(errors) == 1
    return errors[0]


@pytest.mark.parametrize("main,argv,needle", [
    (learn_sharing.main, ["ck.pt", "--threshold", "2"], "argument --threshold: 2 is not in [0, 1]"),
    (learn_sharing.main, ["ck.pt", "--threshold", "nan"], "argument --threshold: nan is not in"),
    (learn_sharing.main, ["ck.pt", "--threshold", "-0.1"], "argument --threshold: -0.1 is not"),
    (learn_sharing.main, ["ck.pt", "--sets", "0"], "argument --sets: 0 is out of range; allowed: "
                                                   "an integer >= 1"),
    (learn_sharing.main, ["ck.pt", "--sets", "2", "--max-sentences", "-1"],
     "argument --max-sentences: -1 is out of range"),
    (learn_policy.main, ["ck.pt", "--out-dir", "d", "--theta", "2"],
     "argument --theta: 2 is not in [0, 1]"),
    (learn_policy.main, ["ck.pt", "--out-dir", "d", "--theta", "nan"], "argument --theta: nan"),
    (learn_policy.main, ["ck.pt", "--out-dir", "d", "--sweep", "0.5,1.5"],
     "argument --sweep: 1.5 is not in [0, 1]"),
    (learn_policy.main, ["ck.pt", "--out-dir", "d", "--sweep", "0.5,x"],
     "argument --sweep: 'x' is not a number"),
    (learn_to_share.main, ["data", "--work-dir", "w", "--round-updates", "10",
                           "--final-updates", "10", "--theta", "1.5"], "argument --theta: 1.5"),
    (learn_to_share.main, ["data", "--work-dir", "w", "--round-updates", "0",
                           "--final-updates", "10"], "argument --round-updates: 0 is out of"),
    # issue 57: still accepted before
    (count_params.main, ["--vocab", "-5"], "argument --vocab: -5 is out of range; allowed: an "
                                           "integer >= 4"),
    (count_params.main, ["--vocab", "3"], "argument --vocab: 3 is out of range"),
    (count_params.main, ["--lora-rank", "-1"], "argument --lora-rank: -1 is out of range; "
                                               "allowed: an integer >= 0"),
    (time_generate.main, ["data", "-c", "ck.pt", "--threads", "0"],
     "argument --threads: 0 is out of range; allowed: an integer >= 1"),
    (time_generate.main, ["data", "-c", "ck.pt", "--repeats", "0"],
     "argument --repeats: 0 is out of range; allowed: an integer >= 1"),
    (time_generate.main, ["data", "-c", "ck.pt", "--sentences", "-3", "--", "--cpu"],
     "argument --sentences: -3 is out of range"),
    (time_generate.main, ["data", "-c", "ck.pt", "--warmup", "-1"],
     "argument --warmup: -1 is out of range; allowed: an integer >= 0"),
])
def test_out_of_range_tool_flags_stop_while_parsing(main, argv, needle, capsys):
    assert needle in _usage_error(main, argv, capsys)


def test_unit_interval_keeps_its_ends():
    assert [unit_interval(t) for t in ("0", "0.9", "1")] == [0.0, 0.9, 1.0]


# ---- budgets (--set) ------------------------------------------------------------------------
def test_every_budget_passes_its_own_check():
    for name in BUDGETS:
        assert load_budget(name)["name"] == name


def _load_mt(overrides):
    return load_budget("tiny", overrides)


BAD_SET_VALUES = [
    ("max_update=-5", "--set max_update=-5: max_update=-5 is out of range; allowed: an integer >= 1"),
    ("max_update=2.5", "allowed: an integer >= 1"),
    ("max_tokens=0", "max_tokens=0 is out of range"),
    ("dropout=1", "allowed: a probability in [0, 1)"),
    ("dropout=-0.1", "allowed: a probability in [0, 1)"),
    ("dropout=nan", "allowed: a probability in [0, 1)"),
    ("lr=0", "allowed: a number in (0, 1]"),
    ("lr=1e6", "allowed: a number in (0, 1]"),
    ("warmup_updates=0", "allowed: an integer >= 1"),
    ("no_such_key=1", "expected KEY=VALUE with KEY one of"),
]
MT_ONLY_BAD_SET_VALUES = [
    ("beam=0", "beam=0 is out of range"),
    ("max_len_b=-5", "allowed: an integer >= 0"),
    ("subset=0", "allowed: an integer >= 1, or none (all)"),
    ("device=tpu", "allowed: cpu or cuda"),
    ("normalize_before=yes", "allowed: true or false"),
    ("heads=3", "heads=3 does not divide dim=16"),
]


def test_a_generation_length_of_zero_is_refused_before_training():
    with pytest.raises(SystemExit) as e:
        _load_mt(["max_len_a=0", "max_len_b=0"])
    assert str(e.value) == ("--set max_len_b=0: max_len_a=0 and max_len_b=0 allow no target token; "
                            "allowed: max_len_a > 0 or max_len_b >= 1")


@pytest.mark.parametrize("load,item,needle", [
    *[pytest.param(_load_mt, i, n, id=f"mt-{i}") for i, n in BAD_SET_VALUES + MT_ONLY_BAD_SET_VALUES],
])
def test_bad_set_values_are_refused_naming_the_value(load, item, needle):
    """A budget reads --set as one line naming the item and the range."""
    with pytest.raises(SystemExit) as e:
        load([item])
    assert needle in str(e.value) and str(e.value).startswith(f"--set {item}")
    assert "\n" not in str(e.value)
    assert load(["max_update=7"])["max_update"] == 7


def test_good_set_values_are_read_as_their_types():
    b = load_budget("tiny", ["max_update=500", "dropout=0", "subset=none", "max_minutes=2.5",
                             "normalize_before=true", "equal_updates=false"])
    assert (b["max_update"], b["dropout"], b["subset"], b["max_minutes"]) == (500, 0, None, 2.5)
    assert b["normalize_before"] is True and b["equal_updates"] is False


def test_a_budget_file_with_an_unknown_key_is_refused(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"max_updates": 100}))
    with pytest.raises(SystemExit, match=f"--budget {path}: unknown key 'max_updates'"):
        load_budget(str(path))


# ---- LoRA rank against the width ------------------------------------------------------------
D, F = 16, 24  # TINY's widths
SHARED = TINY + ["--encoder-layers", "2", "--decoder-layers", "2",
                 "--encoder-share-strategy", "universal", "--decoder-share-strategy", "universal"]


@pytest.mark.parametrize("flags,needle", [
    (["--encoder-share-lora-rank", "17"], "--encoder-share-lora-rank: rank 17 is above the "
     "encoder's width 16 (embedding dim 16, FFN dim 24); allowed: 0 (off) to 16"),
    (["--decoder-share-lora-rank", "100000"], "rank 100000 is above the decoder's width 16"),
    # scope ffn with an FFN narrower than the model: the FFN dim is the width
    (["--encoder-ffn-embed-dim", "8", "--encoder-share-scope", "ffn",
      "--encoder-share-lora-rank", "9"], "width 8 (embedding dim 16, FFN dim 8)"),
])
def test_a_lora_rank_above_the_width_is_refused_before_building(flags, needle):
    with pytest.raises(SharingConfigError) as e:
        build_model("shared_transformer", SHARED + flags)
    assert needle in str(e.value)


def test_a_lora_rank_equal_to_the_width_builds():
    from fairseq_shared.sharing.lora import delta_parameter_count

    model, _ = build_model("shared_transformer", SHARED + ["--encoder-share-lora-rank", str(D)])
    # per tied position: 4 attention D x D weights and fc1/fc2, each delta (out + in) x rank
    assert delta_parameter_count(model.encoder) == 2 * D * (4 * 2 * D + 2 * (D + F))


# ---- SAN policies: the sharing patterns' syntax ---------------------------------------------
@pytest.mark.parametrize("text", ["1,,5", "1,5,", ",1,5", "1 5", "1;5", "1,5.0", "1,x"])
def test_malformed_lists_are_refused_by_both_parsers(text):
    with pytest.raises(ValueError):
        comma_separated_ints(text)
    with pytest.raises(PolicyError) as e:
        parse_policy(text, 6, "--san-self-policy")
    assert str(e.value).startswith("--san-self-policy: ") and "not a list of integers" in str(e.value)
    with pytest.raises(SharingConfigError):
        parse_pattern(text, 2, "--decoder-share-strategy")


def test_both_parsers_read_the_same_lists():
    assert parse_policy("1, 5", 6) == [1, 5] and parse_pattern("1, 2", 2, "--x") == [0, 1]
    assert comma_separated_ints(" 2,2 , 2 ") == [2, 2, 2]


def test_a_typo_in_a_san_policy_stops_the_model_build():
    with pytest.raises(PolicyError, match="--san-self-policy: '1,,5' is not a list of integers"):
        build_model("transformer_san", TINY + ["--decoder-layers", "6", "--san-self-policy", "1,,5"])


# ---- fairseq's own commands: the plug-in's flag errors in one line (issue 38, item 4) -------
@pytest.mark.slow
@pytest.mark.parametrize("arch,flags,needle", [
    ("transformer_cycle_rev", ["--encoder-share-strategy", "cyclic"],
     "--encoder-share-strategy: unknown strategy 'cyclic'; allowed: none, sequence, cycle"),
    ("transformer_san", ["--san-self-policy", "1,,5"],
     "--san-self-policy: '1,,5' is not a list of integers"),
])
def test_fairseq_train_prints_a_bad_plugin_flag_in_one_line(arch, flags, needle, tmp_path_factory):
    from helpers_data import ENV, TINY_TRAIN, USER_DIR, data_bin, run_tool

    data = data_bin(tmp_path_factory)
    argv = [data, "--user-dir", USER_DIR, "--arch", arch, *TINY_TRAIN, "--max-update", "1",
            "--save-dir", tmp_path_factory.mktemp("unused"), *flags]
    code, out = run_tool("fairseq-train", *argv, check=False)
    assert code == 1 and "Traceback" not in out
    assert f"fairseq-train: error: {needle}" in out
    code, out = run_tool("fairseq-train", *argv, check=False, env={**ENV, "FAIRSEQ_SHARED_DEBUG": "1"})
    assert code != 0 and "Traceback" in out and needle in out


def test_every_plugin_input_error_is_one_line_under_fairseq():
    """The excepthook prints every error of this base in one line; these are its kinds."""
    from fairseq_shared.checkpoint_io import CheckpointError
    from fairseq_shared.errors import FairseqSharedError
    from fairseq_shared.export.plain import ExportError
    from fairseq_shared.sharing.assignment import SharingMismatchError

    for kind in (CheckpointError, ExportError, PolicyError, SharingConfigError, SharingMismatchError):
        assert issubclass(kind, FairseqSharedError)


def test_count_params_names_an_unknown_architecture_and_lists_the_known(capsys):
    from fairseq_shared.cli.count_params import main

    with pytest.raises(SystemExit) as stop:
        main(["transformer", "nosuch_arch"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "Traceback" not in err
    assert "unknown architecture nosuch_arch; allowed: any fairseq architecture" in err
    assert "transformer_cycle_rev" in err and "transformer_san" in err


# ---- --{stack}-layers-to-keep: typed by the plug-in (issue 38, item 4) ------------------------
def test_layers_to_keep_is_parsed_as_the_string_fairseq_splits():
    from fairseq.tasks.translation import TranslationTask

    from helpers_model import make_dictionary, parse_args

    flags = TINY + ["--encoder-layers", "4", "--encoder-share-strategy", "cycle",
                    "--encoder-unique-layers", "2"]
    # fairseq's own type (ast.literal_eval) made 0,2 a list that its build_model cannot split
    args = parse_args("shared_transformer", flags + ["--encoder-layers-to-keep", "0,2"])
    assert args.encoder_layers_to_keep == "0,2"
    model, _ = build_model("shared_transformer", flags + ["--encoder-layers-to-keep", "0, 2"])
    assert len(model.encoder.layers) == 2
    # --model-overrides "{'encoder_layers_to_keep': [0, 3]}" or 3: fairseq's parser never sees
    # them; the model writes them back as the string
    d = make_dictionary()
    for override, kept in (([0, 3], 2), (3, 1)):
        args = parse_args("shared_transformer", flags)
        args.encoder_layers_to_keep = override
        model = TranslationTask(args, d, d).build_model(args)
        assert len(model.encoder.layers) == kept
    args = parse_args("shared_transformer", flags)
    args.encoder_layers_to_keep = "0;2"
    with pytest.raises(SharingConfigError, match="^--encoder-layers-to-keep: '0;2' is not a "
                       "comma-separated list of layer indices; allowed: indices from 0"):
        TranslationTask(args, d, d).build_model(args)


@pytest.mark.parametrize("text", [",", "0,,2", "x", "-1"])
def test_a_malformed_layers_to_keep_stops_the_parser_in_one_line(text, capsys):
    from helpers_model import parse_args

    with pytest.raises(SystemExit) as stop:
        parse_args("transformer_cycle_rev", ["--encoder-layers-to-keep", text])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "Traceback" not in err
    assert (f"error: argument --encoder-layers-to-keep: '{text}' is not a comma-separated list "
            "of layer indices") in err


@pytest.mark.slow
def test_fairseq_train_states_a_negative_san_policy_and_a_bad_layer_list(tmp_path_factory):
    """``--san-self-policy -1,7`` is argparse's own: a value starting with '-' that is not a
    number reads as a flag (exit 2, "expected one argument"); the ``=`` form reaches the
    policy's range check. ``--encoder-layers-to-keep ,`` was a SyntaxError traceback."""
    from helpers_data import TINY_TRAIN, USER_DIR, data_bin, run_tool

    base = [data_bin(tmp_path_factory), "--user-dir", USER_DIR, *TINY_TRAIN, "--max-update",
            "1", "--save-dir", tmp_path_factory.mktemp("unused")]
    code, out = run_tool("fairseq-train", *base, "--arch", "transformer_san",
                         "--san-self-policy", "-1,7", check=False)
    assert code == 2 and "Traceback" not in out
    assert "error: argument --san-self-policy: expected one argument" in out
    code, out = run_tool("fairseq-train", *base, "--arch", "transformer_san",
                         "--san-self-policy=-1,7", check=False)
    assert code == 1 and "Traceback" not in out
    assert "fairseq-train: error: --san-self-policy: " in out
    code, out = run_tool("fairseq-train", *base, "--arch", "transformer_cycle_rev",
                         "--encoder-layers-to-keep", ",", check=False)
    assert code == 2 and "Traceback" not in out
    assert "argument --encoder-layers-to-keep: ',' is not a comma-separated list" in out


# ---- help texts and --subset (issue 54) -------------------------------------------------------
def test_every_convert_policy_flag_has_its_help():
    from fairseq_shared.cli import convert_policy

    actions = [a for a in convert_policy.build_parser()._actions if a.dest != "help"]
    assert {a.dest for a in actions} == {"checkpoint_in", "checkpoint_out", "san_self_policy",
                                         "san_cross_policy", "san_cross_reuse",
                                         "san_encoder_policy", "data"}
    for action in actions:
        assert action.help and len(action.help) > 20, action.dest
    assert all("unset: the checkpoint's own" in a.help for a in actions if a.dest.startswith("san"))


def test_subset_is_a_split_in_every_command_and_time_generate_counts_with_sentences(capsys):
    """--subset names a split of the data directory wherever it is a flag; time_generate's
    number of sentences (once its --subset N) is --sentences N, and --subset there says so."""
    from fairseq_shared.cli import export, learn_sharing

    for main in (learn_policy.main, learn_sharing.main, learn_to_share.main, export.main):
        with pytest.raises(SystemExit):
            main(["--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert re.search(r"--subset SUBSET (split|split of the data directory)", text), main.__module__
    with pytest.raises(SystemExit):
        time_generate.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--subset" not in text and "--sentences N decode only N sentences of the split" in text
    args, _, _ = time_generate.parse(["data", "-c", "ck.pt", "--sentences", "150"])
    assert args.sentences == 150


def test_time_generate_refuses_subset_naming_sentences_and_gen_subset(capsys):
    line = _usage_error(time_generate.main, ["data", "-c", "ck.pt", "--subset", "150"], capsys)
    assert line.endswith("error: --subset 150: the number of sentences to decode is "
                         "--sentences N; the split is fairseq-generate's --gen-subset SPLIT "
                         "(after --)")
