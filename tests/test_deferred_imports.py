"""The suite's processes start with fairseq's scikit-learn and SciPy imports deferred
(``tests/deferred_imports/sitecustomize.py``): nothing is imported until used, and what is used
is the real function, with the real result."""

import json
import subprocess
import sys

from scipy.stats import pearsonr, spearmanr, t
from sklearn.metrics import f1_score, matthews_corrcoef

from helpers_data import ENV

CHILD = """
import json, sys
import fairseq_cli.train  # imports fairseq's criterions and tasks, as every fairseq tool does
from fairseq.criterions import sentence_prediction as sp
deferred_at_start = sorted(n for n in ("sklearn", "sklearn.metrics", "scipy.stats")
                           if type(sys.modules[n]).__name__ == "_DeferredModule")
x, y = [0, 1, 1, 0, 1], [0, 1, 0, 0, 1]
values = [sp.f1_score(x, y), sp._matthews_corrcoef(x, y), sp.pearsonr(x, y)[0],
          sp.spearmanr(x, y)[0]]
from scipy.stats import t  # after first use: the real module
import scipy.stats
print(json.dumps({"deferred_at_start": deferred_at_start, "values": values,
                  "t": t.ppf(0.975, 4), "real_after": type(scipy.stats).__name__}))
"""


def test_fairseq_starts_without_them_and_gets_the_real_functions_on_first_use():
    result = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                            env=ENV, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["deferred_at_start"] == ["scipy.stats", "sklearn", "sklearn.metrics"]
    x, y = [0, 1, 1, 0, 1], [0, 1, 0, 0, 1]
    assert out["values"] == [f1_score(x, y), matthews_corrcoef(x, y), pearsonr(x, y)[0],
                             spearmanr(x, y)[0]]
    assert out["t"] == t.ppf(0.975, 4) and out["real_after"] == "module"
