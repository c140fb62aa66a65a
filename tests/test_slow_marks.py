"""The rule that marks tests ``slow`` (tests/conftest.py) on snippets of source."""

import ast

import conftest


def spawns(code: str, spawners=conftest.HELPER_SPAWNERS) -> bool:
    return conftest._spawns(ast.parse(code), spawners)


def test_starting_a_process_is_slow():
    assert spawns("subprocess.run(['fairseq-train'])")
    assert spawns("run_tool('fairseq-generate', data)")
    assert spawns("queue.work_pairs(budget_curve.SUITE, items, data, work, results, 'tiny')")
    assert spawns("recipes.prepare(task, out)")


def test_building_and_running_a_model_in_process_is_not():
    assert not spawns("model.train(); model(src_tokens, src_lengths, prev)")
    assert not spawns("build_model('shared_transformer', flags)")
    assert not spawns("self.run_item()")


def test_a_helper_that_calls_a_spawner_is_a_spawner_itself():
    helpers = {n.name: n for n in ast.parse(
        "def corpus(p):\n    return build_toy_corpus(p)\n"
        "def trained(p):\n    return corpus(p)\n"
        "def pure(x):\n    return x + 1\n").body}
    found = conftest._fixed_point(helpers, conftest.BASE_SPAWNERS)
    assert {"corpus", "trained"} <= found and "pure" not in found
    assert "data_bin" in conftest.HELPER_SPAWNERS  # tests/helpers_data.py builds a corpus
