"""Seed 000's benchmark: per input length one cold and two hot requests of a fixed output length, and the report.

Seed 000 measured every change the same way (a fixed question, fixed output length, one cold + two hot requests)
and kept a change only when it beat a preset threshold, comparing like with like. Here, per input length:
a short warm-up (first-request JIT must not land in the cold figure), a cold request whose prompt starts with a
new nonce (prefix caching hashes blocks as a chain from the first token, so nothing of it can be cached), then
the identical prompt twice (hot). Every request asks for max_tokens with ignore_eos, so each decodes exactly
max_tokens tokens and decode speeds of two runs compare equal work.

Pure Python (no Ansible) so plain pytest can test it; library/vllm_benchmark.py sends the requests.
"""

import random
import statistics

from ansible.module_utils.acceptance import decode_tps

QUESTION = (
    "Write a Python function that merges overlapping intervals in a list of (start, end) pairs, "
    "with a docstring and three unit tests."
)
# Context words for the long prompts; which word comes where is fixed per length (see _document).
# fmt: off
FILLER = [
    "the", "service", "model", "request", "token", "cache", "block", "engine", "node", "memory", "kernel", "prefill",
    "decode", "answer", "question", "document", "section", "value", "table", "record", "result", "change", "speed",
    "length", "input", "output", "first", "second", "time", "start", "state", "layer", "head", "batch", "queue",
    "weight", "image", "link", "port", "file", "line", "word", "number", "list", "order", "method", "rule"
]
# fmt: on

# (row field, label, better direction, Markdown format)
METRICS = (
    ("cold_ttft_s", "cold TTFT (s)", "lower", "{:.3f}"),
    ("hot_ttft_s", "hot TTFT (s)", "lower", "{:.3f}"),
    ("hot_cached_tokens", "hot cached tokens", "higher", "{:d}"),
    ("decode_tps", "decode tok/s", "higher", "{:.1f}"),
)
NOISE = "~ (noise)"


def _document(words):
    # Seeded by the length only: every run sends the same text, so two runs compare like with like.
    rng = random.Random(f"spark-serve bench {words}")
    return " ".join(rng.choice(FILLER) for _ in range(words))


def _chat(name, kind, words, text, max_tokens):
    return {
        "name": f"{name}-{words}",
        "kind": kind,
        "input_words": words,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
    }


def plan(input_words, max_tokens, nonce, repeats=1):
    """Requests in sending order: per length a warm-up, then `repeats` times cold, hot-1, hot-2 (each repeat's
    prompt starts with its own nonce, so its cold request is cold again).

    Each: name, kind (warmup, cold, hot), input_words, repeat (1-based), messages, max_tokens, ignore_eos and the
    run's `user` (a session-affine router, e.g. a fleet's, then sends the whole run to one replica and its cache).
    `nonce` must be new for every run.
    """
    requests = []
    for words in input_words:
        requests.append(dict(_chat("warmup", "warmup", words, QUESTION, max_tokens), repeat=1))
        for repeat in range(1, repeats + 1):
            tag = "" if repeats == 1 else f".{repeat}"
            long_prompt = f"{nonce}{tag}-{words}\n{_document(words)}\n\n{QUESTION}"
            requests += [
                dict(_chat(name + tag, kind, words, long_prompt, max_tokens), repeat=repeat)
                for name, kind in (("cold", "cold"), ("hot-1", "hot"), ("hot-2", "hot"))
            ]
    return [dict(request, user=f"spark-serve-bench-{nonce}") for request in requests]


def _present(values):
    return [value for value in values if value is not None]


def _figures(cold, hot):
    """One repeat's figures: cold TTFT, mean hot TTFT, the smaller hot cached tokens, mean decode speed."""
    cold_ttft = _present(m.get("ttft_s") for m in cold)
    hot_ttft = _present(m.get("ttft_s") for m in hot)
    hot_cached = _present(m.get("cached_tokens") for m in hot)
    tps = _present(decode_tps(m) for m in cold + hot)
    return {
        "cold_ttft_s": cold_ttft[0] if cold_ttft else None,
        "hot_ttft_s": statistics.mean(hot_ttft) if hot_ttft else None,
        "hot_cached_tokens": min(hot_cached) if hot_cached else None,
        "decode_tps": statistics.mean(tps) if tps else None,
    }


def rows(measurements):
    """One row per input length (in measuring order) from the per-request measurements; warm-ups are left out.

    Each figure is the median over the repeats (cached tokens: the smallest), and spread_pct gives, per figure
    measured in at least two repeats, (max - min) / median in %: the run's own noise. A figure is None when none
    of its requests produced it (errors, or a server without prompt token details); problems() says why.
    """
    result = []
    for words in dict.fromkeys(m["input_words"] for m in measurements):
        measured = [m for m in measurements if m["input_words"] == words and m["kind"] != "warmup"]
        repeats = list(dict.fromkeys(m.get("repeat", 1) for m in measured))
        per_repeat = [
            _figures(
                [m for m in measured if m.get("repeat", 1) == r and m["kind"] == "cold"],
                [m for m in measured if m.get("repeat", 1) == r and m["kind"] == "hot"],
            )
            for r in repeats
        ]
        prompt_tokens = _present(m.get("prompt_tokens") for m in measured)
        row = {
            "input_words": words,
            "prompt_tokens": prompt_tokens[0] if prompt_tokens else None,
            "repeats": len(repeats),
            "spread_pct": {},
        }
        for field, _, _, _ in METRICS:
            values = _present(figures[field] for figures in per_repeat)
            if not values:
                row[field] = None
            else:
                row[field] = min(values) if field == "hot_cached_tokens" else statistics.median(values)
            if len(values) > 1 and statistics.median(values):
                row["spread_pct"][field] = (max(values) - min(values)) / statistics.median(values) * 100
        result.append(row)
    return result


def problems(measurements, max_tokens):
    """Why this run's figures cannot be trusted: failed requests, and requests that did not decode exactly
    max_tokens tokens (a server ignoring ignore_eos would make decode speeds of two runs incomparable)."""
    found = []
    for m in measurements:
        if m.get("error"):
            found.append(f"{m['name']}: {m['error']}")
        elif m.get("completion_tokens") != max_tokens:
            found.append(f"{m['name']}: decoded {m.get('completion_tokens')} tokens, not max_tokens {max_tokens}")
    return found


def _cell(value, fmt="{}"):
    return "n/a" if value is None else fmt.format(value)


def markdown_table(table_rows):
    lines = [
        "| input words | prompt tokens | " + " | ".join(label for _, label, _, _ in METRICS) + " |",
        "|---:|---:|" + "---:|" * len(METRICS),
    ]
    for row in table_rows:
        cells = [_cell(row["input_words"]), _cell(row["prompt_tokens"])]
        cells += [_cell(row[field], fmt) for field, _, _, fmt in METRICS]
        lines.append("| " + " | ".join(cells) + " |")
    if any(row.get("repeats", 1) > 1 for row in table_rows):
        lines += [
            "",
            "Medians over the repeats; their spread, (max - min) / median:",
            "",
            "| input words | repeats | " + " | ".join(label for _, label, _, _ in METRICS) + " |",
            "|---:|---:|" + "---:|" * len(METRICS),
        ]
        for row in table_rows:
            spread = row.get("spread_pct", {})
            cells = [_cell(row["input_words"]), _cell(row.get("repeats", 1))]
            cells += [_cell(spread.get(field), "{:.1f} %") for field, _, _, _ in METRICS]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def compare(table_rows, earlier_rows, noise_pct=3.0):
    """Per input length measured in both runs and per metric: earlier, new, ratio new/earlier, change in %,
    the better direction, the noise band in % (noise_pct, or the larger spread either run measured over its
    repeats), and verdict better, worse, NOISE (|change| below the band) or None (no ratio)."""
    earlier_by_words = {row["input_words"]: row for row in earlier_rows}
    result = []
    for row in table_rows:
        earlier = earlier_by_words.get(row["input_words"])
        if earlier is None:
            continue
        for field, _, better, _ in METRICS:
            old, new = earlier.get(field), row.get(field)
            band = max([noise_pct] + [r.get("spread_pct", {}).get(field, 0.0) for r in (earlier, row)])
            entry = {
                "input_words": row["input_words"],
                "metric": field,
                "better": better,
                "earlier": old,
                "new": new,
                "ratio": None,
                "change_pct": None,
                "noise_band_pct": band,
                "verdict": None,
            }
            if old and new is not None:
                entry["ratio"] = new / old
                entry["change_pct"] = (new / old - 1) * 100
                if abs(entry["change_pct"]) < band:
                    entry["verdict"] = NOISE
                else:
                    entry["verdict"] = "better" if (new < old) == (better == "lower") else "worse"
            result.append(entry)
    return result


def comparison_table(comparison):
    formats = {field: (label, fmt) for field, label, _, fmt in METRICS}
    lines = [
        "| input words | metric | earlier | new | new/earlier | change | noise band | verdict |",
        "|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for entry in comparison:
        label, fmt = formats[entry["metric"]]
        lines.append(
            f"| {entry['input_words']} | {label}, {entry['better']} is better | "
            f"{_cell(entry['earlier'], fmt)} | {_cell(entry['new'], fmt)} | "
            f"{_cell(entry['ratio'], '{:.3f}')} | {_cell(entry['change_pct'], '{:+.1f} %')} | "
            f"±{entry['noise_band_pct']:.1f} % | "
            f"{_cell(entry['verdict'])} |"
        )
    return "\n".join(lines) + "\n"


def newest_run_of(runs, deployment_id):
    """The newest of the earlier runs (each the JSON a run wrote, with its `path`) measured on deployment_id,
    or None."""
    mine = [run for run in runs if (run.get("deployment") or {}).get("id") == deployment_id]
    return max(mine, key=lambda run: run["created_utc"], default=None)
