"""The GPU check's bundle and command (issue 56; docs/gpu.md).

The slow test is the rehearsal: ``scripts/gpu_check.sh --cpu BUNDLE OUT`` from a fresh
virtual environment that sees only a torch install (torch, its requirements and numpy,
linked from this venv into a folder of their own) and the bundle, ``--no-index``, at tiny
sizes. The bundle is built once per machine by ``scripts/build_gpu_bundle.sh`` into the
user cache (rebuilt when that script changes; PyPI needed then), and the fairseq-fixed wheel
that gpu_check.sh builds from the bundle's sdist is kept there too, one per (sdist sha256,
Python, torch): the first run on a machine builds it (minutes), later runs install it.
"""

import json
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "fairseq_shared"
LIMIT_BYTES = 16_000_000


def gpu_check():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPTS / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bundle_spec() -> dict:
    """name -> (version, kind) from build_gpu_bundle.sh's SPEC block."""
    text = (SCRIPTS / "build_gpu_bundle.sh").read_text()
    block = text.split('SPEC="', 1)[1].split('"', 1)[0]
    spec = {}
    for line in block.strip().splitlines():
        req, kind = line.split()[:2]
        name, version = req.split("==")
        spec[name.lower()] = (version, kind)
    return spec


def pins(path: Path) -> dict:
    return {m.group(1).lower(): m.group(2) for m in
            re.finditer(r"^([A-Za-z0-9_.\-]+)==(\S+)", path.read_text(), re.M)}


#: where the bundle differs from requirements.txt, and why (build_gpu_bundle.sh says so too)
DEVIATIONS = {"pytest": "8.3.5"}  # pytest >= 8.4 imports Pygments (1.25 MB) at start


def test_the_bundle_pins_what_the_project_pins():
    spec = bundle_spec()
    required = pins(ROOT / "requirements.txt")
    for name, (version, _) in spec.items():
        if name in required:
            assert version == DEVIATIONS.get(name, required[name]), name
    setup = (SCRIPTS / "setup_env.sh").read_text()
    assert f"fairseq-fixed=={spec['fairseq-fixed'][0]}" in setup
    assert f"cython=={spec['cython'][0]}" in setup
    # fairseq's own needs that the check imports, each from the bundle
    assert {"hydra-core", "omegaconf", "antlr4-python3-runtime", "pyyaml", "bitarray",
            "packaging", "tqdm", "setuptools", "wheel", "cython", "pytest"} <= set(spec)
    # the machine's own, never in the bundle
    assert not {"torch", "numpy", "torchaudio", "nvidia-cudnn-cu12"} & set(spec)
    assert spec["fairseq-fixed"][1] == "sdist"  # built against the machine's torch


def test_every_stage_has_a_time_limit_and_one_overall_deadline():
    text = (SCRIPTS / "gpu_check.sh").read_text()
    cuda = dict(re.findall(r"(L_\w+)=(\d+)", text.split("if [ \"$MODE\" = cuda ]; then", 2)[2]
                           .split("else", 1)[0]))
    assert set(cuda) == {"L_VENV", "L_INSTALL", "L_ENV", "L_TRAIN", "L_EXACT", "L_DECODE",
                         "L_TESTS"}
    for stage in ("venv", "install", "env", "train", "exactness", "decode", "tests"):
        assert re.search(rf'stage {stage} "\$L_\w+"', text), stage
    assert "DEADLINE=${GPU_CHECK_DEADLINE:-450}" in text  # + 30 s for the report: 8 minutes
    assert 'timeout -k 10 "$limit"' in text


def test_the_training_matrix_covers_every_model_and_mode():
    g = gpu_check()
    assert set(g.MODELS) == {"vanilla", "cycle_rev", "san", "lora"}
    assert set(g.MODES) == {"fp16", "amp", "bf16", "bf16_memory_efficient"}
    # the CPU rehearsal trains every model and every mode at least once
    assert {m for m, _ in g.CPU_RUNS} == set(g.MODELS)
    assert {mode for _, mode in g.CPU_RUNS} == set(g.MODES)
    assert g.SIZES["cuda"]["dim"] == 512 and g.SIZES["cuda"]["updates"] >= 200
    flags = g.model_flags("lora", g.SIZES["cuda"])
    assert "transformer_cycle_rev" in flags and "--decoder-share-lora-rank" in flags
    assert g.model_flags("vanilla_half", g.SIZES["cuda"])[:6] == [
        "--arch", "transformer", "--encoder-layers", "3", "--decoder-layers", "3"]


def test_losses_are_read_from_both_log_formats():
    g = gpu_check()
    log = ("2026-12-07 | INFO | train_inner | epoch 001:  1 / 9 loss=6.9, ppl=1\n"
           "INFO:train_inner:epoch 001:  2 / 9 loss=nan, ppl=2\n")
    losses = g.losses_of(log)
    assert losses[0] == 6.9 and losses[1] != losses[1]  # nan is read, and is not finite


def test_the_exactness_stage_checks_every_pattern_of_the_cpu_suite():
    import test_lora
    import test_model
    import test_san
    import test_shared_lm

    names = [name for name, _, _ in gpu_check().exactness_patterns("cpu")]
    expected = (1 + len(test_model.STRATEGIES) * len(test_model.SCOPES)
                + len(test_model.STRATEGIES) + 1 + 2 * len(test_san.POLICIES)
                + 3 * len(test_lora.RELAXED_STRATEGIES) + 1 + 1
                + len(test_shared_lm.STRATEGIES) * len(test_shared_lm.SCOPES))
    assert len(names) == len(set(names)) == expected


def test_tied_tensors_stay_one_after_half_and_bfloat16():
    import copy

    import torch

    from helpers_model import TINY, build_model
    from test_model import sharing_flags

    g = gpu_check()
    model, _ = build_model("shared_transformer", TINY + sharing_flags("cycle_rev", "2", "all"))
    ties = g.tie_groups(model)
    assert ties and ["decoder.layers.0.fc1.weight", "decoder.layers.3.fc1.weight"] in ties
    for cast in (lambda m: m.half(), lambda m: m.bfloat16()):
        assert g.tie_groups(cast(copy.deepcopy(model))) == ties
    broken = copy.deepcopy(model)
    broken.decoder.layers[3].fc1.weight = torch.nn.Parameter(broken.decoder.layers[3].fc1.weight.clone())
    assert g.tie_groups(broken) != ties


def test_the_report_renders_every_stage_and_says_what_failed(tmp_path):
    g = gpu_check()
    (tmp_path / "stages.tsv").write_text("venv\tok\t0\t3.1\t90\ninstall\tok\t0\t70.2\t300\n"
                                         "train\ttimeout\t124\t240.0\t240\n")
    g.write_stage(tmp_path, "env", {"ok": True, "device": "cuda", "gpu": "NVIDIA H100",
                                    "python": "3.12.3", "torch": "2.11.0", "torch_cuda": "12.8"})
    report = g.build_report(tmp_path)
    assert not report["ok"] and report["total_seconds"] == pytest.approx(313.3)
    text = g.render_markdown(report)
    assert text.startswith("# GPU check: FAIL") and "NVIDIA H100" in text
    assert "| train | timeout | 240.0 | 240 |" in text and "CUDA 12.8" in text


@pytest.mark.slow
def test_rehearsal_installs_from_the_bundle_alone_and_runs_every_stage(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("PYTHONPATH", None)
    bundle = CACHE / "gpu_bundle"
    built = subprocess.run(["bash", str(SCRIPTS / "build_gpu_bundle.sh"), str(bundle)],
                           env=dict(env, BUILD_PYTHON=sys.executable), capture_output=True,
                           text=True, timeout=900)
    assert built.returncode == 0, (built.stdout + built.stderr)[-3000:]
    info = json.loads((bundle / "bundle.json").read_text())
    listed = (bundle / "MANIFEST.sha256").read_text().split()[1::2]
    assert info["total_bytes"] == sum((bundle / name).stat().st_size for name in listed)
    assert sum(f.stat().st_size for f in bundle.iterdir()) <= LIMIT_BYTES

    # "a torch install": torch, what it requires, and numpy, linked into a folder of their own
    site = tmp_path / "machine_site"
    torch_dists = torch_only_site(site)
    assert "torch" in torch_dists and "fairseq-fixed" not in torch_dists
    out = tmp_path / "out"
    result = subprocess.run(
        ["bash", str(SCRIPTS / "gpu_check.sh"), "--cpu", str(bundle), str(out)],
        env=dict(env, GPU_CHECK_PYTHON=sys._base_executable, GPU_CHECK_BASE_SITE=str(site),
                 GPU_CHECK_WHEEL_CACHE=str(CACHE / "gpu_check_wheels")),
        capture_output=True, text=True, timeout=1200)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    report = json.loads((out / "report.json").read_text())
    assert report["ok"], output[-6000:]
    assert [r["stage"] for r in report["stages"]] == [
        "verify", "venv", "install", "env", "train", "exactness", "decode", "tests"]
    check_rehearsal(out, report, torch_dists, env)


def check_rehearsal(out: Path, report: dict, torch_dists: list, env: dict) -> None:
    # the environment holds the bundle's packages, the plug-in and pip, nothing else
    dists = subprocess.run([str(out / "venv" / "bin" / "python"), "-c",
                             "import importlib.metadata as m, json, sysconfig; print(json.dumps(sorted("
                             "{d.metadata['Name'].lower() for d in m.distributions("
                             "path=[sysconfig.get_paths()['purelib']])})))"],
                            capture_output=True, text=True, env=env, cwd=out)
    own = set(json.loads(dists.stdout)) - {d.replace("_", "-") for d in torch_dists}
    allowed = {n.replace("_", "-") for n in bundle_spec()} | {"fairseq-shared", "pip"}
    assert own - {"fairseq-shared"} and own <= allowed | {n.replace("-", "_") for n in allowed}, own

    env_info, train = report["env"], report["train"]
    # the torch-only site has none of them: all three stand-ins are used
    assert sorted(env_info["standins"]) == ["lxml", "scipy", "sklearn"]
    assert env_info["fairseq"] == "0.12.3.1" and env_info["torch"] == metadata.version("torch")
    assert env_info["fairseq_file"].startswith(str(out / "venv"))
    runs = {(r["model"], r["mode"]): r for r in train["runs"]}
    for (model, mode), run in runs.items():
        if mode == "bf16_stock":  # fairseq's own --bf16 asks torch_xla for a TPU
            assert run["status"] == "expected-fail" and "xla" in run["error"], run
        else:
            assert run["status"] == "ok" and run["loss_last"] < run["loss_first"], run
    exact = report["exactness"]
    assert exact["ok"] and len(exact["patterns"]) > 50
    assert all(r["float16_ties_kept"] and r["bfloat16_ties_kept"] for r in exact["patterns"])
    decode = report["decode"]
    assert decode["batch_1"]["san_vs_vanilla"] > 0 and "cycle_rev_vs_vanilla_half" in decode["batch_8"]
    assert report["tests"]["counts"]["passed"] > 40 and not report["tests"]["counts"].get("failed")
    md = (out / "report.md").read_text()
    assert md.startswith("# GPU check: PASS") and "## Exactness in half precision" in md


def torch_only_site(dest: Path, roots=("torch", "numpy")) -> list:
    """Link torch, the distributions it requires (recursively) and numpy from this
    environment into ``dest``: what a machine with only torch installed has."""
    dest.mkdir(parents=True, exist_ok=True)
    seen, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen.add(key)
        todo += [re.match(r"[A-Za-z0-9_.\-]+", r).group(0) for r in dist.requires or []
                 if "extra ==" not in r]
        for f in dist.files or []:
            top = f.parts[0]
            if top in ("..", "__pycache__") or top.endswith(".pth"):
                continue
            src, link = Path(dist.locate_file(top)), dest / top
            if src.exists() and not link.exists():
                link.symlink_to(src)
    return sorted(seen)
