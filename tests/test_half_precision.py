"""Half precision on this CPU machine (issue 23, item 5): ``fairseq-train
--memory-efficient-fp16 --cpu`` trains a cycle_rev and a SAN model, the loss falls, tied layers
stay one tensor (in the fp16 model and in the checkpoint), and the checkpoint decodes. The
CUDA side (``--fp16``, ``--bf16``, ``--amp``, decoding speed) is ``scripts/gpu_check.sh``; its
CPU mode is rehearsed by ``tests/test_gpu_bundle.py``."""

import re

import pytest
import torch

from helpers_data import TINY_ARCH, TINY_TRAIN, USER_DIR, data_bin, generate_in_process, run_tool

SAN_ARCH = [
    "--user-dir", USER_DIR, "--arch", "transformer_san", "--encoder-layers", "2",
    "--decoder-layers", "4", "--san-self-policy", "2,2", "--san-cross-policy", "2,2",
    *TINY_ARCH[TINY_ARCH.index("--encoder-embed-dim"):],
]
MODELS = {"cycle_rev": TINY_ARCH, "san": SAN_ARCH}


def _losses(log):
    return [float(x) for x in re.findall(r"train_inner \|.* loss=([\d.]+)", log)]


@pytest.fixture(scope="module", params=sorted(MODELS))
def fp16_run(request, tmp_path_factory):
    data = data_bin(tmp_path_factory)
    save_dir = tmp_path_factory.mktemp(f"fp16_{request.param}")
    _, log = run_tool("fairseq-train", data, *MODELS[request.param], *TINY_TRAIN,
                      "--memory-efficient-fp16", "--fp16-init-scale", "8", "--lr", "0.005",
                      "--max-update", "12", "--seed", "1", "--save-dir", save_dir,
                      "--no-epoch-checkpoints", "--no-save-optimizer-state")
    return request.param, data, save_dir / "checkpoint_last.pt", log


def test_loss_falls_in_fp16(fp16_run):
    _, _, _, log = fp16_run
    losses = _losses(log)
    assert len(losses) >= 10, log[-2000:]
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.3, losses


def test_checkpoint_stores_each_tied_set_once(fp16_run):
    name, _, checkpoint, _ = fp16_run
    state = torch.load(checkpoint, weights_only=False)
    assert state["cfg"]["common"]["fp16"] and state["cfg"]["common"]["memory_efficient_fp16"]
    weights = state["model"]
    # fairseq's checkpoint writer (utils.move_to_cpu) turns fp16 tensors into fp32 on saving
    assert weights["decoder.layers.0.fc1.weight"].dtype == torch.float32
    fc1 = sorted(k for k in weights if k.endswith("fc1.weight"))
    if name == "cycle_rev":  # 4+4 layers over 2 sets (1 2 2 1): the sets, not the layers
        assert fc1 == [f"{s}.layers.{i}.fc1.weight" for s in ("decoder", "encoder") for i in (0, 1)]
    else:
        assert len(fc1) == 2 + 4


def test_tied_layers_stay_one_tensor_in_the_fp16_model(fp16_run):
    from fairseq_shared.export.plain import load_shared

    name, data, checkpoint, _ = fp16_run
    if name != "cycle_rev":
        pytest.skip("SAN shares attention weights at run time, not tensors")
    model = load_shared(str(checkpoint), str(data)).model.half()
    layers = model.decoder.layers
    assert layers[3].fc1.weight is layers[0].fc1.weight  # cycle_rev 1 2 2 1
    assert layers[2].self_attn.q_proj.weight is layers[1].self_attn.q_proj.weight
    assert layers[0].fc1.weight.dtype == torch.float16
    unique = {id(p) for p in model.parameters()}
    names = [n for n, _ in model.named_parameters(remove_duplicate=False)]
    assert len(unique) < len(names)


def test_fp16_checkpoint_decodes(fp16_run):
    _, data, checkpoint, _ = fp16_run
    out = generate_in_process(data, "--path", checkpoint, "--user-dir", USER_DIR,
                              "--beam", "4", "--batch-size", "4", "--cpu",
                              "--required-batch-size-multiple", "1", "--max-len-b", "12")
    assert len(re.findall(r"^H-\d+\t", out, re.M)) == 12, out[-2000:]
