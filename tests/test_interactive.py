"""fairseq-interactive with the plug-in and a line longer than the model's positions (issue 57):
fairseq's own behaviour, the same for fairseq's ``transformer``. fairseq filters the batch of
each input line by ``--max-source-positions`` (``filter_indices_by_size``): by default the
over-long line stops the command (the lines after it are never read); with fairseq's
``--skip-invalid-size-inputs-valid-test`` it is skipped with a warning and the rest translated."""

import random
import re

from helpers_data import USER_DIR, data_bin, run_tool, trained_checkpoints

LONG = 1100  # pieces: more than the model's 1,024 source positions


def _interactive(tmp_path_factory, *flags):
    data, ckpt = data_bin(tmp_path_factory), trained_checkpoints(tmp_path_factory)
    rng = random.Random(0)
    lines = ["w1 w2 w3", " ".join(f"w{rng.randrange(24)}" for _ in range(LONG)), "w4 w5 w6 w7"]
    return run_tool("fairseq-interactive", data, "--user-dir", USER_DIR, "--path",
                    ckpt / "checkpoint3.pt", "--source-lang", "src", "--target-lang", "tgt",
                    "--cpu", "--beam", "2", *flags, check=False,
                    input="\n".join(lines) + "\n")


def _translated(log):
    return [line.split("\t")[1] for line in log.splitlines() if line.startswith("S-")]


def test_an_over_long_line_stops_fairseq_interactive_unless_told_to_skip(tmp_path_factory):
    code, log = _interactive(tmp_path_factory)
    assert code != 0
    assert re.search(rf"Size of sample #0 is invalid \(=\((np\.int64\()?{LONG + 1}\)?, 0\)\) "
                     r"since max_positions=\(1024, 1024\), skip this example with "
                     "--skip-invalid-size-inputs-valid-test", log)
    assert _translated(log) == ["w1 w2 w3"]  # the third line is never read

    code, log = _interactive(tmp_path_factory, "--skip-invalid-size-inputs-valid-test")
    assert code == 0
    assert "1 samples have invalid sizes and will be skipped, max_positions=(1024, 1024)" in log
    assert _translated(log) == ["w1 w2 w3", "w4 w5 w6 w7"]
