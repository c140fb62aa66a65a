"""The tools' one checkpoint helper (:mod:`fairseq_shared.tools.checkpoints`): one refusal of
what a tool cannot take, the same for every tool and the export, and one rebuilt state."""

from argparse import Namespace

import pytest
from omegaconf import OmegaConf

from fairseq_shared.export.plain import TAKES as EXPORT, ExportError
from fairseq_shared.tools import convert_policy, convert_sharing, learn_policy, learn_sharing
from fairseq_shared.tools.checkpoints import Loaded, Takes, rebuilt, refuse


def _model(arch, **flags):
    return Namespace(arch=arch, _name=arch, encoder_layers=2, decoder_layers=4, **flags)


SAN = dict(san_self_policy="1,3", san_cross_policy="2,2", san_encoder_policy=None,
           san_cross_reuse="output")


def test_every_tool_refuses_a_model_it_does_not_take_naming_what_it_takes():
    lstm = _model("lstm")
    for takes in (convert_sharing.TAKES, convert_policy.TAKES, learn_sharing.TAKES,
                  learn_policy.TAKES, EXPORT):
        with pytest.raises(takes.error) as error:
            refuse(lstm, takes)
        assert str(error.value) == (
            f"cannot {takes.verb} --arch lstm (model lstm); allowed: checkpoints of the "
            f"{' or '.join(takes.models)} model (and its architectures)")
    refuse(_model("transformer"), convert_sharing.TAKES)  # a vanilla model converts
    with pytest.raises(ExportError):
        refuse(_model("transformer"), EXPORT)  # but is already stock: nothing to export


def test_san_models_get_one_refusal_with_the_tools_reason():
    san = _model("transformer_san", **SAN)
    for takes in (convert_sharing.TAKES, EXPORT):
        with pytest.raises(takes.error) as error:
            refuse(san, takes)
        assert str(error.value).startswith(
            f"cannot {takes.verb} a SAN model (--san-self-policy 1,3, --san-cross-policy 2,2): "
            + takes.san[:20])
    for takes in (convert_policy.TAKES, learn_policy.TAKES, learn_sharing.TAKES):
        refuse(san, takes)  # SAN is what they work on, or fine
    trivial = _model("shared_transformer", **{**SAN, "san_self_policy": "1,1,1,1",
                                              "san_cross_policy": None})
    refuse(trivial, EXPORT)  # all one-layer blocks: no sharing
    lm = OmegaConf.create({"_name": "transformer_lm_cycle_rev", "decoder_layers": 4})
    refuse(lm, EXPORT)  # no SAN flags at all


def test_a_rebuilt_state_has_the_new_weights_and_config_and_nothing_of_the_old_parameters():
    class Model:
        def state_dict(self):
            return {"w": 1}

    cfg = OmegaConf.create({"task": {"_name": "translation"}, "model": {"arch": "old"}})
    state = {"args": Namespace(arch="old"), "model": {"w": 0}, "last_optimizer_state": {"m": 1},
             "optimizer_history": [{"num_updates": 7}],
             "extra_state": {"ema": {"w": 0}, "epoch": 3}}
    new_cfg = Namespace(arch="shared_transformer")
    out = rebuilt(Loaded("in.pt", state, cfg, None, None), Model(), new_cfg, {"report": 1})
    assert out["model"] == {"w": 1} and out["args"] is None and out["cfg"]["model"] is new_cfg
    assert out["cfg"]["task"] == {"_name": "translation"} and out["last_optimizer_state"] is None
    assert out["extra_state"] == {"epoch": 3, "report": 1}
    assert out["optimizer_history"] == [{"num_updates": 7}]


def test_takes_default_to_the_checkpoint_error():
    from fairseq_shared.checkpoint_io import CheckpointError

    assert Takes("read", ("transformer",)).error is CheckpointError
