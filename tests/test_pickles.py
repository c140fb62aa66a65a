"""Checkpoints load whatever the package's layout: nothing the package saves pickles a type of
its own (a module that moves would make them unreadable, and safe loading refuses any type it
does not know). Read from the pickle's opcodes; nothing is unpickled."""

import io
import pickletools
import zipfile
from pathlib import Path

import torch

from fairseq_shared.checkpoint_io import save
from fairseq_shared.tools import averaging, convert_policy, convert_sharing
from helpers_checkpoint import build_for_data, save_checkpoint
from helpers_model import make_dictionary

torch.set_num_threads(1)

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "regression.pt"
STRINGS = ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "SHORT_BINSTRING",
           "BINSTRING", "STRING")


def pickled_globals(data: bytes) -> set:
    """``module.name`` of every global a pickle refers to (``GLOBAL`` and ``STACK_GLOBAL``,
    whose two strings may come from the memo)."""
    memo, strings, found, last = {}, [], set(), None
    for op, arg, _ in pickletools.genops(io.BytesIO(data)):
        if op.name in STRINGS:
            strings.append(arg)
            last = arg
            continue
        if op.name in ("BINGET", "LONG_BINGET", "GET") and isinstance(memo.get(arg), str):
            strings.append(memo[arg])
            last = memo[arg]
            continue
        if op.name == "MEMOIZE":
            memo[len(memo)] = last
        elif op.name in ("BINPUT", "LONG_BINPUT", "PUT"):
            memo[arg] = last
        elif op.name == "GLOBAL":
            found.add(arg.replace(" ", "."))
        elif op.name == "STACK_GLOBAL":
            found.add(f"{strings[-2]}.{strings[-1]}")
        last = None
    return found


def checkpoint_globals(path) -> set:
    """The globals of a ``torch.save`` file (the zip format: its ``data.pkl``)."""
    with zipfile.ZipFile(path) as archive:
        name = next(n for n in archive.namelist() if n.endswith("data.pkl"))
        return pickled_globals(archive.read(name))


def own_types(path) -> list:
    return sorted(g for g in checkpoint_globals(path) if g.split(".")[0] == "fairseq_shared")


def test_the_scan_finds_a_pickled_type_of_the_package(tmp_path):
    from fairseq_shared.sharing.flags import StackSharing

    path = tmp_path / "bad.pt"
    torch.save({"plan": StackSharing("encoder", [0, 0], "all")}, path)
    assert own_types(path) == ["fairseq_shared.sharing.flags.StackSharing"]
    assert "torch._utils._rebuild_tensor_v2" in checkpoint_globals(FIXTURE)


def test_the_regression_fixture_written_before_the_move_pickles_no_type_of_the_package():
    assert FIXTURE.exists()
    assert own_types(FIXTURE) == []


def test_the_tools_write_checkpoints_without_types_of_the_package(tmp_path):
    """A toy translation checkpoint converted to a relaxed sharing map and to a SAN policy,
    and averaged: each written by the package (checkpoint_io.save), with plain types only."""
    data = tmp_path / "data"
    data.mkdir()
    for lang in ("src", "tgt"):
        make_dictionary().save(str(data / f"dict.{lang}.txt"))
    flags = ["--encoder-layers", "2", "--decoder-layers", "2",
             "--source-lang", "src", "--target-lang", "tgt"]
    args, _, model = build_for_data(data, "shared_transformer", flags)
    vanilla = save_checkpoint(tmp_path / "vanilla.pt", args, model)
    shared, san = tmp_path / "shared.pt", tmp_path / "san.pt"
    convert_sharing.convert_checkpoint(str(vanilla), str(shared), {
        "decoder_share_strategy": "universal", "encoder_share_strategy": "cycle",
        "encoder_unique_layers": 1, "decoder_share_lora_rank": 2})
    convert_policy.convert_checkpoint(str(vanilla), str(san), self_policy="2", cross_policy="2")
    averaged = save(averaging.average_checkpoints([str(shared), str(shared)]),
                    str(tmp_path / "averaged.pt"))
    for path in (shared, san, averaged):
        assert own_types(path) == [], path
        assert torch.load(path, weights_only=True)["cfg"]["model"].arch == "shared_transformer"
