"""The main job's rows (its queue records joined with the interleaved decode) and its Markdown
table."""

from typing import Dict, List, Optional

from harness.statistics import lookup_lines, markdown_table
from fairseq_shared.markdown import fmt

#: row key -> key of a model's result in the timing report
DECODE_KEYS = {
    "bleu": "bleu", "chrf": "chrf", "sentences": "sentences",
    "decode_tokens_per_s": "tokens_per_s_median", "decode_speed_vs_vanilla": "speed_vs_baseline",
    # CPU time (one thread: hardly moved by other jobs) and what beam search did
    "decode_cpu_tokens_per_s": "cpu_tokens_per_s_median",
    "decode_cpu_speed_vs_vanilla": "cpu_speed_vs_baseline",
    "decode_cpu_speed_min": "cpu_speed_vs_baseline_min",
    "decode_cpu_speed_max": "cpu_speed_vs_baseline_max",
    "decode_steps": "decoder_steps", "decode_hit_max": "hit_max_len",
    "decode_cpu_ms_per_step": "cpu_ms_per_step"}


def main_job_rows(records: Dict[str, Dict], decode: Optional[Dict]) -> List[Dict]:
    """One row per trained model: its record's counts and training speed (relative to
    vanilla's), then what the timing report measured for it."""
    dec = {r["model"]: r for r in (decode or {}).get("results", [])}
    base_wps = (records.get("vanilla") or {}).get("train_wps")
    rows = []
    for name, rec in records.items():
        d = dec.get(name, {})
        rows.append({**{k: rec.get(k) for k in ("name", "N", "M", "params", "updates",
                                                 "train_wps", "valid_loss")},
                     "train_speed_vs_vanilla": rec["train_wps"] / base_wps
                     if base_wps and rec.get("train_wps") else None,
                     **{k: d.get(v) for k, v in DECODE_KEYS.items()}})
    return rows


def main_job_table(rows: List[Dict], decode: Optional[Dict], lookup: Optional[Dict],
                   budget: Dict) -> str:
    """The main job's one table (``make demo``): the two models side by side, what was
    decoded and how, the budget."""
    decode = decode or {}
    s = decode.get("settings", {})
    lines = markdown_table(["model", "layers (enc+dec)", "parameter sets per stack", "parameters",
                            "updates", "BLEU", "chrF", "decoding CPU tokens/s",
                            "decoder steps (at length limit)", "CPU ms/step",
                            "vs vanilla (CPU, min-max)", "wall tokens/s"], align="lll" + "r" * 9)
    lines += lookup_lines(lookup, 12, 5)
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['N']}+{r['N']} | {r['M']} | {fmt(r['params'], ',')} | "
            f"{fmt(r['updates'], 'd')} | {fmt(r['bleu'], '.2f')} | {fmt(r['chrf'], '.2f')} | "
            f"{fmt(r.get('decode_cpu_tokens_per_s'), '.1f')} | {fmt(r.get('decode_steps'), 'd')} "
            f"({fmt(r.get('decode_hit_max'), 'd')}) | {fmt(r.get('decode_cpu_ms_per_step'), '.2f')} "
            f"| x{fmt(r.get('decode_cpu_speed_vs_vanilla'), '.2f')} "
            f"({fmt(r.get('decode_cpu_speed_min'), '.2f')}-{fmt(r.get('decode_cpu_speed_max'), '.2f')}) "
            f"| {fmt(r['decode_tokens_per_s'], '.1f')} |")
    lines += [
        "",
        f"Decoded: `{s.get('gen_subset')}` set, {s.get('subset')}; beam {s.get('beam')}, lenpen "
        f"{s.get('lenpen')}, batch {s.get('batch_size')}, {s.get('device')} with "
        f"{s.get('torch_threads')} threads; max length {s.get('max_len_a')} x source + "
        f"{s.get('max_len_b')}; tokens/s = median of {s.get('timed_passes')} interleaved timed "
        f"passes after warm-up ({s.get('warmup_batches')} batches; fairseq's generator), per "
        f"second of the process's CPU time (wall clock in the last column); the ratio is the "
        f"median (min-max) of the per-round CPU ratios. Decoder steps: incremental decoder "
        f"calls of one pass (a batch runs until its last sentence has {s.get('beam')} finished "
        f"hypotheses), so a model that only stops earlier shows fewer steps, not a lower "
        f"CPU ms/step.",
        f"BLEU `{decode.get('bleu_signature')}`, chrF `{decode.get('chrf_signature')}`, "
        f"against {s.get('references')}.",
        "Lookup baseline: no model, the English of the training verse whose Spanish is "
        "closest (the corpus audit, `python -m fairseq_shared.cli.audit`), on the same "
        "verses; a model is worth what it scores above it." if lookup else
        "No lookup baseline: the corpus has no audit (`python -m fairseq_shared.cli.audit "
        "RAW_DIR`).",
        f"Budget `{budget['name']}`: d={budget['dim']}, FFN {budget['ffn']}, L={budget['L']}, "
        f"max {budget['max_update']} updates (cap {budget['max_minutes']} min per model), "
        f"max tokens {budget['max_tokens']}, {budget['threads']} training threads.",
        "",
    ]
    return "\n".join(lines)
