"""One owner for each default and each list: the default strategy and scope and the strategies
that need M are :mod:`fairseq_shared.sharing.assignment`'s; the flags' and the commands'
defaults are read from their owners, not written again."""

import argparse
import ast
from pathlib import Path

from fairseq_shared.sharing import assignment
from fairseq_shared.sharing.flags import STACK_DEFAULTS, STACKS

PACKAGE = Path(__file__).resolve().parents[1] / "fairseq_shared"
OWNER = PACKAGE / "sharing" / "assignment.py"


def string_collections(path: Path):
    """``(line, {strings})`` of every literal tuple, list or set of strings in ``path``."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and node.elts and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
            yield node.lineno, {e.value for e in node.elts}


def test_the_strategies_that_need_m_are_listed_once():
    needs_m = set(assignment.M_STRATEGIES)
    assert needs_m == {"sequence", "cycle", "cycle_rev"}
    lists = [f"{path.relative_to(PACKAGE.parent)}:{line}"
             for path in sorted(PACKAGE.rglob("*.py"))
             for line, strings in string_collections(path) if strings == needs_m]
    assert lists == [f"fairseq_shared/sharing/assignment.py:{_line_of('M_STRATEGIES')}"]


def _line_of(name: str) -> int:
    tree = ast.parse(OWNER.read_text(encoding="utf-8"))
    return next(n.lineno for n in tree.body if isinstance(n, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == name for t in n.targets))


def test_an_unset_flag_means_the_owners_default():
    from fairseq_shared.models.architectures import shared_base_architecture
    from fairseq_shared.sharing.flags import StackSharing

    assert STACK_DEFAULTS["share_strategy"] == assignment.DEFAULT_STRATEGY == "none"
    assert STACK_DEFAULTS["share_scope"] == assignment.DEFAULT_SCOPE == "all"
    assert assignment.layer_assignment(None, 3) == [0, 1, 2]
    args = argparse.Namespace(encoder_layers=3, decoder_layers=3)
    plan = StackSharing.from_args(args, "encoder")  # no sharing flag at all
    assert (plan.assignment, plan.scope) == ([0, 1, 2], assignment.DEFAULT_SCOPE)
    shared_base_architecture(args)
    for stack in STACKS:
        assert {k: getattr(args, f"{stack}_{k}") for k in STACK_DEFAULTS} == STACK_DEFAULTS


def test_a_conversion_starts_a_new_map_from_the_defaults():
    from fairseq_shared.tools.convert_sharing import SHARING_ATTRS, target_args

    args = argparse.Namespace(encoder_layers=2, decoder_layers=2, arch="transformer",
                              encoder_share_scope="attn", decoder_untie_norms=True)
    new = target_args(args, {"encoder_share_strategy": "universal",
                             "decoder_share_strategy": "universal"})
    for stack in STACKS:
        fresh = {a: getattr(new, f"{stack}_{a}") for a in SHARING_ATTRS if a != "share_strategy"}
        assert fresh == {a: STACK_DEFAULTS[a] for a in fresh}


def _defaults(main_module, argv):
    """The parsed defaults of a command: its ``main`` run up to ``parse_args``."""
    seen = {}

    class Stop(Exception):
        pass

    def parse(self, args=None, namespace=None):
        seen.update(vars(original(self, args, namespace)))
        raise Stop

    original = argparse.ArgumentParser.parse_args
    argparse.ArgumentParser.parse_args = parse
    try:
        main_module.main(argv)
    except Stop:
        pass
    finally:
        argparse.ArgumentParser.parse_args = original
    return seen


def test_the_commands_take_their_defaults_from_the_tools():
    from fairseq_shared.cli import convert_policy as convert_policy_cli
    from fairseq_shared.cli import learn_policy as learn_policy_cli
    from fairseq_shared.cli import learn_sharing as learn_sharing_cli
    from fairseq_shared.cli import learn_to_share as learn_to_share_cli
    from fairseq_shared.san.flags import CROSS_REUSE, DEFAULT_CROSS_REUSE
    from fairseq_shared.tools import learn_policy, learn_sharing, policy_rounds

    assert CROSS_REUSE[0] == DEFAULT_CROSS_REUSE
    policy = _defaults(learn_policy_cli, ["ckpt.pt", "--out-dir", "d"])
    assert (policy["theta"], policy["similarity"], policy["max_sentences"],
            policy["max_tokens"]) == (learn_policy.THETA, learn_policy.SIMILARITIES[0],
                                      learn_policy.MAX_SENTENCES, learn_policy.MAX_TOKENS)
    rounds = _defaults(learn_to_share_cli, ["data", "--work-dir", "w", "--round-updates", "1",
                                            "--final-updates", "2"])
    assert (rounds["max_rounds"], rounds["theta"], rounds["similarity"],
            rounds["max_sentences"]) == (policy_rounds.MAX_ROUNDS, learn_policy.THETA,
                                         learn_policy.SIMILARITIES[0], learn_policy.MAX_SENTENCES)
    sharing = _defaults(learn_sharing_cli, ["ckpt.pt", "--sets", "2"])
    assert (sharing["measure"], sharing["grouping"], sharing["max_sentences"],
            sharing["max_tokens"]) == (learn_sharing.MEASURES[0], learn_sharing.GROUPINGS[0],
                                       learn_sharing.MAX_SENTENCES, learn_sharing.MAX_TOKENS)
    converted = _defaults(convert_policy_cli, ["in.pt", "out.pt"])
    assert converted["san_cross_reuse"] is None  # unset: the checkpoint's own is kept
