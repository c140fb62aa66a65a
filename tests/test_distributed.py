"""fairseq data-parallel training on CPU (gloo): 2 workers == 1 worker with --update-freq 2.

fairseq shards each epoch's batches round-robin over workers, so 2 workers at update-freq 1
see, per update, exactly the two batches that 1 worker at update-freq 2 accumulates. With
dropout off and the same seed, the trained parameters must agree to float tolerance.
"""

import pickle
import socket

import pytest
import torch
from fairseq import checkpoint_utils, options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.distributed import utils as distributed_utils
from omegaconf import OmegaConf

from helpers_data import BIN, TINY_ARCH, TINY_TRAIN, data_bin, run_tool

UPDATES = 4
COMMON = [*TINY_ARCH, *TINY_TRAIN, "--seed", "7", "--max-update", str(UPDATES)]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def update_lines(log):
    """The per-update train_inner log lines, without timing fields."""
    keep = ("loss", "wpb", "bsz", "num_updates")
    lines = []
    for line in log.splitlines():
        if "| train_inner |" in line:
            fields = line.split("|")[-1].split(",")
            lines.append([f.strip() for f in fields if f.strip().split("=")[0] in keep])
    return lines


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    data = data_bin(tmp_path_factory)
    root = tmp_path_factory.mktemp("distributed")
    logs = {}
    # reference: one process accumulating 2 batches per update
    _, logs["single"] = run_tool(
        "fairseq-train", data, *COMMON, "--update-freq", "2", "--save-dir", root / "single",
    )
    # torchrun, 2 CPU workers over gloo
    _, logs["torchrun"] = run_tool(
        "torchrun", "--standalone", "--nproc_per_node", "2", BIN / "fairseq-train", data, *COMMON,
        "--distributed-world-size", "2", "--distributed-backend", "gloo",
        "--save-dir", root / "torchrun",
    )
    # no launcher: fairseq (with the CPU fix in fairseq_shared.compat) spawns the 2 workers
    _, logs["spawn"] = run_tool(
        "fairseq-train", data, *COMMON, "--distributed-world-size", "2",
        "--distributed-backend", "gloo", "--distributed-port", free_port(),
        "--save-dir", root / "spawn",
    )
    return root, logs


@pytest.mark.parametrize("launcher", ["torchrun", "spawn"])
def test_two_workers_match_update_freq_two(runs, launcher):
    root, logs = runs
    assert "distributed init (rank 0)" in logs[launcher]
    assert "distributed init (rank 1)" in logs[launcher]

    # each update saw both workers' batches, as the reference saw both accumulated batches
    reference = update_lines(logs["single"])
    assert len(reference) == UPDATES
    assert update_lines(logs[launcher]) == reference

    # checkpoint1.pt: end of epoch 1 (2 updates); checkpoint_last.pt: after UPDATES
    for name in ("checkpoint1.pt", "checkpoint_last.pt"):
        single, multi = torch.load(root / "single" / name), torch.load(root / launcher / name)
        updates = single["optimizer_history"][-1]["num_updates"]
        assert multi["optimizer_history"][-1]["num_updates"] == updates
        assert single["model"].keys() == multi["model"].keys()
        for key, expected in single["model"].items():
            got = multi["model"][key]
            assert torch.allclose(got, expected, rtol=1e-5, atol=1e-5), (
                f"{key} after {updates} updates: max diff {(got - expected).abs().max().item():.3g}"
            )
    assert updates == UPDATES


@pytest.mark.parametrize("launcher", ["torchrun", "spawn"])
def test_tied_tensors_stay_tied(runs, launcher):
    path = str(runs[0] / launcher / "checkpoint_last.pt")
    state = checkpoint_utils.load_checkpoint_to_cpu(path)
    # cycle_rev over 4 layers, 2 sets: layer->set 0 1 1 0; aliases are not stored
    for stack in ("encoder", "decoder"):
        assert f"{stack}.layers.0.fc1.weight" in state["model"]
        assert f"{stack}.layers.1.fc1.weight" in state["model"]
        assert f"{stack}.layers.2.fc1.weight" not in state["model"]
        assert f"{stack}.layers.3.fc1.weight" not in state["model"]

    [model], _, _ = checkpoint_utils.load_model_ensemble_and_task([path])
    for stack in (model.encoder, model.decoder):
        layers = stack.layers
        for alias, owner in ((3, 0), (2, 1)):
            for (name, p_alias), (_, p_owner) in zip(
                layers[alias].named_parameters(), layers[owner].named_parameters()
            ):
                assert p_alias is p_owner, name
        assert not torch.equal(layers[0].fc1.weight, layers[1].fc1.weight)


def parsed_cfg(*flags):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser, ["/nonexistent-data", *TINY_ARCH, "--cpu", "--max-update", "1", *flags]
    )
    return convert_namespace_to_omegaconf(args)


def never_called(cfg, **kwargs):
    raise AssertionError("training must not start")


def test_cpu_world_size_two_with_nccl_fails_loudly(monkeypatch):
    """Never a silent exit 0: NCCL cannot run on CPU, and we say which flag to use."""
    for key in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"):
        monkeypatch.delenv(key, raising=False)
    cfg = parsed_cfg("--distributed-world-size", "2")  # default backend: nccl
    with pytest.raises(ValueError, match="--distributed-backend gloo"):
        distributed_utils.call_main(cfg, never_called)

    # an explicit init method would have fairseq spawn min(#GPUs, world size) = 0 workers
    cfg = parsed_cfg("--distributed-world-size", "2", "--distributed-backend", "gloo",
                     "--distributed-init-method", "tcp://localhost:1")
    with pytest.raises(ValueError, match="--distributed-no-spawn"):
        distributed_utils.call_main(cfg, never_called)

    # under torchrun too
    for key, value in dict(MASTER_ADDR="127.0.0.1", MASTER_PORT="1", WORLD_SIZE="2", RANK="1").items():
        monkeypatch.setenv(key, value)
    cfg = parsed_cfg("--distributed-world-size", "2")
    with pytest.raises(ValueError, match="--distributed-backend gloo"):
        distributed_utils.call_main(cfg, never_called)


def test_checkpoint_broadcast_to_other_ranks_loads_safely(runs, monkeypatch, tmp_path):
    """Resuming with 2 workers: rank 0 loads the checkpoint and broadcasts it (torch.save
    -> torch.load of a DictConfig-holding state). Record rank 0's side through fairseq's real
    broadcast_object, replay it as rank 1."""
    state = checkpoint_utils.load_checkpoint_to_cpu(str(runs[0] / "single" / "checkpoint_last.pt"))
    assert OmegaConf.is_config(state["cfg"])

    wire = []
    monkeypatch.setattr(distributed_utils, "broadcast", lambda t, src, group: wire.append(t.clone()))
    monkeypatch.setattr(distributed_utils, "get_rank", lambda group: 0)
    distributed_utils.broadcast_object(state, src_rank=0, group=None, dist_device=torch.device("cpu"))

    def receive(tensor, src, group):
        tensor.copy_(wire.pop(0).reshape(tensor.shape))

    monkeypatch.setattr(distributed_utils, "broadcast", receive)
    monkeypatch.setattr(distributed_utils, "get_rank", lambda group: 1)
    # stock fairseq (unpatched receive) refuses it under weights_only
    unpatched = distributed_utils._broadcast_object_slow.__wrapped__
    sent = list(wire)
    with pytest.raises(pickle.UnpicklingError, match="DictConfig"):
        unpatched(None, 0, None, torch.device("cpu"))
    wire[:] = sent
    received = distributed_utils.broadcast_object(
        None, src_rank=0, group=None, dist_device=torch.device("cpu")
    )
    assert not wire
    assert received["cfg"].model.arch == "transformer_cycle_rev"
    assert received["model"].keys() == state["model"].keys()
    for key, tensor in state["model"].items():
        assert torch.equal(received["model"][key], tensor)

    # the omegaconf types are allowed for that broadcast only, not for files
    path = tmp_path / "dictconfig.pt"
    torch.save({"cfg": state["cfg"]}, path)
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        torch.load(path)
