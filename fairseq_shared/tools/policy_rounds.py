"""Rounds of training and re-learning a SAN policy: the paper's joint procedure
(LEARNTOSHARE, Xiao et al. 2019) as one driver over fairseq-train (the library side of
``python -m fairseq_shared.cli.learn_to_share``).

Round 0 starts from no sharing (every block one layer). Each round:

1. train under the current policy with fairseq-train (``--san-self-policy`` /
   ``--san-cross-policy`` appended to the given flags) for ``--round-updates`` more updates,
   continuing from the previous round's checkpoint;
2. re-learn the policy from the model's attention on held-out data
   (:mod:`fairseq_shared.tools.learn_policy`);
3. if the policy did not change, stop; else convert the checkpoint to the new policy
   (:mod:`fairseq_shared.tools.convert_policy`, followers drop Q/K; new leaders start from
   their old leader's) and go on.

Then it trains to convergence under the final policy (until ``--final-updates`` total
updates, or whatever stopping flags the fairseq-train flags give). Continuing rounds load
the converted checkpoint with ``--reset-optimizer`` (the parameter set changed); the update
counter and learning-rate schedule continue. Everything is logged to ``DIR/learn_to_share.json``.
"""

import json
import logging
import os
import subprocess
from typing import List, Optional

from fairseq_shared.checkpoint_io import atomic_write, copy_file, write_text
from fairseq_shared.fairseq_commands import fairseq_command
from fairseq_shared.san.policy import format_policy, no_sharing
from fairseq_shared.tools.convert_policy import convert_checkpoint
from fairseq_shared.tools.learn_policy import MAX_SENTENCES, SIMILARITIES, THETA, learn_policy

logger = logging.getLogger("fairseq_shared.learn_to_share")

MAX_ROUNDS = 5


def _flag_value(flags: List[str], name: str) -> Optional[str]:
    for i, f in enumerate(flags):
        if f == name and i + 1 < len(flags):
            return flags[i + 1]
        if f.startswith(name + "="):
            return f.split("=", 1)[1]
    return None


def train(data: str, save_dir: str, flags: List[str], policy, max_update: int,
          restore: Optional[str], log_path: str) -> str:
    cmd = fairseq_command("train", data, *flags, "--save-dir", save_dir,
                          "--max-update", str(max_update),
                          "--san-self-policy", format_policy(policy["self"]),
                          "--san-cross-policy", format_policy(policy["cross"]))
    if restore:
        cmd += ["--restore-file", restore, "--reset-optimizer"]
    logger.info("$ " + " ".join(cmd))
    runs = []  # the log is kept whether the training fails or not
    atomic_write(log_path, lambda log: runs.append(
        subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT)))
    runs[0].check_returncode()
    ckpt = os.path.join(save_dir, "checkpoint_last.pt")
    if not os.path.exists(ckpt):
        raise RuntimeError(f"fairseq-train wrote no {ckpt}; see {log_path}")
    return ckpt


def learn_to_share(data: str, work_dir: str, train_flags: List[str], round_updates: int,
                   final_updates: int, max_rounds: int = MAX_ROUNDS, theta: float = THETA,
                   similarity: str = SIMILARITIES[0], subset: str = "valid",
                   max_sentences: int = MAX_SENTENCES) -> dict:
    if _flag_value(train_flags, "--max-update") is not None:
        raise SystemExit("learn_to_share: give --round-updates/--final-updates, not --max-update")
    layers = int(_flag_value(train_flags, "--decoder-layers") or 6)
    os.makedirs(work_dir, exist_ok=True)
    policy = {"self": no_sharing(layers), "cross": no_sharing(layers)}
    history = []
    restore = None
    updates = 0
    converged = False
    for r in range(max_rounds):
        updates += round_updates
        rdir = os.path.join(work_dir, f"round{r}")
        ckpt = train(data, rdir, train_flags, policy, updates, restore,
                     os.path.join(work_dir, f"round{r}.train.log"))
        learned = learn_policy(ckpt, os.path.join(rdir, "policy"), data, subset, theta,
                               similarity, max_sentences)
        entry = {"round": r, "updates": updates,
                 "trained_with": {k: format_policy(v) for k, v in policy.items()},
                 "learned": {k: format_policy(v) for k, v in learned.items()}}
        history.append(entry)
        logger.info(f"round {r}: trained with {entry['trained_with']}, learned {entry['learned']}")
        if learned == policy:
            converged = True
            restore = ckpt
            break
        converted = os.path.join(work_dir, f"round{r}.converted.pt")
        convert_checkpoint(ckpt, converted, self_policy=learned["self"],
                           cross_policy=learned["cross"], data=data)
        policy = learned
        restore = converted
    final_dir = os.path.join(work_dir, "final")
    os.makedirs(final_dir, exist_ok=True)
    if restore and restore.endswith("checkpoint_last.pt"):
        # same policy: continue from it (optimizer state included)
        copy_file(restore, os.path.join(final_dir, "checkpoint_last.pt"))
        restore_final = None
    else:
        restore_final = restore
    final_cmd_flags = list(train_flags)
    ckpt = train(data, final_dir, final_cmd_flags, policy, max(final_updates, updates),
                 restore_final, os.path.join(work_dir, "final.train.log"))
    result = {"converged": converged, "rounds": history,
              "final_policy": {k: format_policy(v) for k, v in policy.items()},
              "final_checkpoint": ckpt, "theta": theta, "similarity": similarity}
    write_text(os.path.join(work_dir, "learn_to_share.json"), json.dumps(result, indent=1))
    return result
