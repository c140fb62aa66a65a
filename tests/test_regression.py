"""Bit-exact regression: every family, rebuilt from tests/fixtures/regression.pt, computes
exactly what the code computed when the fixture was written (full forward pass,
incremental decoding, cached and recomputing beam search).

The fixture was written by tests/fixtures/make_regression_fixture.py before the SAN
redesign (issue 11); it is the reference the code must keep matching. Float results are
compared with torch.equal on the platform recorded in the fixture (same torch version, CPU
kernels and CPU model); elsewhere summation order may differ in the last bit, so there the
check is atol 1e-5 with identical hypotheses. Records written before the CPU model was part of
the platform name none, and are compared the second way: the one_wide_ffn records, written on
an AMD EPYC with AVX512 kernels, differ in the last bit on an Intel Xeon with the same kernels.
"""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))

from make_regression_fixture import load, outputs, platform  # noqa: E402
from helpers_model import build_model  # noqa: E402

FIXTURE = load()


def same_platform(recorded) -> bool:
    """Whether this platform is the one a record was computed on (records added later carry
    their own; the others, the fixture's)."""
    return {k: v for k, v in recorded.items() if k != "threads"} == {
        k: v for k, v in platform().items() if k != "threads"}


SAME_PLATFORM = same_platform(FIXTURE["platform"])


def assert_same(a, b, what, exact=SAME_PLATFORM):
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape, what
        if exact or a.dtype in (torch.int64, torch.bool):
            assert torch.equal(a, b), what
        else:
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5, msg=what)
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), what
        for k in a:
            assert_same(a[k], b[k], f"{what}.{k}", exact)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), what
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{what}[{i}]", exact)
    else:
        assert a == b, what


@pytest.mark.parametrize("name", sorted(FIXTURE["models"]))
def test_outputs_equal_the_recorded_ones(name):
    torch.set_num_threads(1)
    record = FIXTURE["models"][name]
    model, task = build_model(record["arch"], record["flags"])
    model.load_state_dict(record["state"], strict=True)  # same parameter names too
    model.eval()
    exact = same_platform(record.get("platform", FIXTURE["platform"]))
    assert_same(outputs(model, task), record["expected"], name, exact)


def test_the_fixture_covers_every_family():
    from fairseq_shared.models.architectures import FAMILIES

    archs = {record["arch"] for record in FIXTURE["models"].values()}
    assert set(FAMILIES) | {"shared_transformer"} <= archs
    assert os.path.getsize(os.path.join(os.path.dirname(__file__), "fixtures", "regression.pt")) < 2**20
