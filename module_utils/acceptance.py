"""Acceptance gate core: the fixed request set, /metrics reading, the summary and the verdict.

Pure functions without Ansible imports; library/vllm_acceptance.py sends the requests and measures them
(module_utils/openai_client.py).
"Ready" means loaded + warm + this fixed set passing (docs/engine-facts.md section 2): a short answer, one long
prompt sent cold then twice hot, two long sessions alternated A, B, A, B (the revisits must still hit), one forced
tool call.
Cache hits are judged per request from usage.prompt_tokens_details.cached_tokens and by the /metrics counter
deltas, never by the engine log's cumulative hit rate (docs/engine-facts.md section 3).
"""

import hashlib
import json
import math
import re
import statistics

# Counter names from vLLM 0.32's own source, plus the `_total` suffix prometheus_client adds on exposition:
# vllm/v1/metrics/loggers.py (prefix cache) and vllm/v1/spec_decode/metrics.py (speculative decoding).
COUNTERS = {
    "prefix_cache_queries": "vllm:prefix_cache_queries_total",
    "prefix_cache_hits": "vllm:prefix_cache_hits_total",
    "spec_decode_draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "spec_decode_accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
}

DEFAULT_LONG_PROMPT_WORDS = 1200
DEFAULT_MAX_TOKENS = 16
# Structured output may pad the forced tool call's JSON with whitespace; 16 tokens can cut it off.
DEFAULT_TOOL_MAX_TOKENS = 128
TOOL_NAME = "get_weather"
TOOL_PARAMETERS = {
    "type": "object",
    "properties": {"city": {"type": "string", "enum": ["Paris", "Berlin", "Tokyo"]}},
    "required": ["city"],
    "additionalProperties": False,
}

# 64 common words (one token each in the test bed's tiny tokenizer, about one in real ones): a hash byte
# modulo 64 picks one without bias.
# fmt: off
WORDS = [
    "side", "model", "then", "together", "between", "joins", "pass", "fast", "port", "start", "wakes", "deployment",
    "them", "text", "waits", "around", "sit", "downloaded", "first", "small", "quick", "both", "can", "schedules",
    "proves", "help", "lazy", "they", "one", "short", "head", "pinned", "serve", "listens", "chases", "holds",
    "digest", "today", "token", "alone", "results", "weights", "share", "time", "when", "engine", "open", "revision",
    "group", "sentence", "ranks", "computers", "brown", "jumps", "dog", "link", "half", "gathers", "requests",
    "nothing", "cable", "once", "image", "garden"
]
# fmt: on

METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
HOT_KINDS = ("hot",)
CACHED_KINDS = ("hot", "revisit")  # requests whose prompt the engine has seen before in this run


def _after_labels(text):
    """What follows a `{...}` label set at the start of `text` (label values may hold quoted braces)."""
    in_quotes = escaped = False
    for index, char in enumerate(text):
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == '"':
            in_quotes = not in_quotes
        elif char == "}" and not in_quotes:
            return text[index + 1 :]
    return ""


def parse_metrics(text):
    """Prometheus text exposition -> {metric name: sum of its samples over every label set}.

    Comments, `_created` samples (creation timestamps, not counts) and non-numeric or non-finite values
    (a NaN would poison the sum) are left out.
    """
    totals = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = METRIC_NAME.match(line)
        if not match or match.group().endswith("_created"):
            continue
        name, rest = match.group(), line[match.end() :]
        if rest.startswith("{"):
            rest = _after_labels(rest)
        fields = rest.split()
        if not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        if math.isfinite(value):
            totals[name] = totals.get(name, 0.0) + value
    return totals


def counter_deltas(before, after):
    """{key of COUNTERS: after - before}; None when the counter is not exposed (e.g. no speculative decoding)
    or went backwards (the server restarted between the two reads, so the difference means nothing)."""
    deltas = {}
    for key, name in COUNTERS.items():
        if name not in after:
            deltas[key] = None
            continue
        delta = after[name] - before.get(name, 0.0)
        deltas[key] = delta if delta >= 0 else None
    return deltas


def _words(label, count):
    """`count` words that depend only on `label`: the same text every time, a different text per label."""
    words = []
    block = 0
    while len(words) < count:
        digest = hashlib.sha256(f"spark-serve acceptance {label} {block}".encode()).digest()
        words.extend(WORDS[byte % len(WORDS)] for byte in digest)
        block += 1
    return " ".join(words[:count])


def _long_prompt(nonce, label, count):
    # The nonce comes first: prefix caching hashes blocks as a chain from the first token, so a new nonce
    # makes every block of this run's prompts new to the engine and the cold request really cold.
    return (
        f"{nonce} Document {label}. {_words(label, count)}\n"
        f"Which word appears most often in document {label}? Answer in one word."
    )


def request_plan(acceptance, nonce):
    """The fixed request set, in sending order, from a profile's `acceptance` mapping.

    Each entry: name, kind (short, cold, hot, session, revisit, tool), messages, max_tokens, and for the tool
    call also tools and tool_choice. `nonce` must be new for every gate run.
    """
    acceptance = acceptance or {}
    words = int(acceptance.get("long_prompt_words", DEFAULT_LONG_PROMPT_WORDS))
    max_tokens = int(acceptance.get("max_tokens", DEFAULT_MAX_TOKENS))
    tool_max_tokens = int(acceptance.get("tool_max_tokens", DEFAULT_TOOL_MAX_TOKENS))

    def chat(name, kind, text, tokens=max_tokens):
        return {"name": name, "kind": kind, "messages": [{"role": "user", "content": text}], "max_tokens": tokens}

    repeated = _long_prompt(nonce, "C", words)
    session_a = _long_prompt(nonce, "A", words)
    session_b = _long_prompt(nonce, "B", words)
    tool_call = chat("tool-call", "tool", "What is the weather in Paris? Use the tool.", tool_max_tokens)
    tool_call["tools"] = [
        {
            "type": "function",
            "function": {"name": TOOL_NAME, "description": "Current weather of a city.", "parameters": TOOL_PARAMETERS},
        }
    ]
    tool_call["tool_choice"] = {"type": "function", "function": {"name": TOOL_NAME}}
    return [
        chat("short", "short", "What is the capital of France? Answer in one word."),
        chat("cold", "cold", repeated),
        chat("hot-1", "hot", repeated),
        chat("hot-2", "hot", repeated),
        chat("session-a", "session", session_a),
        chat("session-b", "session", session_b),
        chat("revisit-a", "revisit", session_a),
        chat("revisit-b", "revisit", session_b),
        tool_call,
    ]


def _ratio(numerator, denominator):
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def decode_tps(measurement):
    """(completion_tokens - 1) / (last token time - first token time): the first token belongs to the prefill."""
    tokens = measurement.get("completion_tokens")
    first, last = measurement.get("ttft_s"), measurement.get("last_token_s")
    if tokens is None or tokens < 2 or first is None or last is None or last <= first:
        return None
    return (tokens - 1) / (last - first)


def _tool_call_problem(measurement):
    """Why the forced tool call is not usable, or None when it is."""
    calls = measurement.get("tool_calls") or []
    if not calls:
        return f"no tool call returned (finish_reason {measurement.get('finish_reason')})"
    call = calls[0]
    if call.get("name") != TOOL_NAME:
        return f"called {call.get('name')!r} instead of the forced {TOOL_NAME!r}"
    try:
        arguments = json.loads(call.get("arguments") or "")
    except ValueError as err:
        return (
            f"arguments are not valid JSON ({err}; finish_reason {measurement.get('finish_reason')}): "
            f"{(call.get('arguments') or '')[:200]!r}"
        )
    if not isinstance(arguments, dict):
        return f"arguments are JSON but not an object: {call.get('arguments')[:200]!r}"
    return None


def _rounded(value, digits=4):
    return None if value is None else round(value, digits)


def summarize(measurements, deltas):
    """Per-request figures and the aggregates the thresholds are checked against."""
    rows = []
    for m in measurements:
        row = {
            "name": m["name"],
            "kind": m["kind"],
            "ttft_s": _rounded(m.get("ttft_s")),
            "decode_tps": _rounded(decode_tps(m), 2),
            "prompt_tokens": m.get("prompt_tokens"),
            "completion_tokens": m.get("completion_tokens"),
            "cached_tokens": m.get("cached_tokens"),
            "hit_ratio": _rounded(_ratio(m.get("cached_tokens"), m.get("prompt_tokens"))),
        }
        if m.get("error"):
            row["error"] = m["error"]
        if m["kind"] == "tool":
            problem = m.get("error") or _tool_call_problem(m)
            row["tool_call_ok"] = problem is None
            if problem:
                row["tool_call_problem"] = problem
        rows.append(row)

    def values(field, kinds=None):
        return [r[field] for r in rows if r[field] is not None and (kinds is None or r["kind"] in kinds)]

    hot_ttft = values("ttft_s", HOT_KINDS)
    cached_hits = values("hit_ratio", CACHED_KINDS)
    decode = values("decode_tps")
    cold = values("ttft_s", ("cold",))
    tool_rows = [r for r in rows if r["kind"] == "tool"]
    hits, queries = deltas.get("prefix_cache_hits"), deltas.get("prefix_cache_queries")
    draft, accepted = deltas.get("spec_decode_draft_tokens"), deltas.get("spec_decode_accepted_tokens")
    return {
        "cold_ttft_s": cold[0] if cold else None,
        "hot_ttft_s": max(hot_ttft) if hot_ttft else None,
        "hot_hit_ratio": min(cached_hits) if cached_hits else None,
        "decode_tps": _rounded(statistics.median(decode), 2) if decode else None,
        "prefix_cache_hits_delta": hits,
        "prefix_cache_queries_delta": queries,
        "metrics_hit_ratio": _rounded(_ratio(hits, queries)),
        "spec_decode_acceptance": _rounded(_ratio(accepted, draft)),
        "tool_call_ok": bool(tool_rows) and all(r["tool_call_ok"] for r in tool_rows),
        "requests": rows,
    }


def evaluate(summary, thresholds, previous=None):
    """(passed, failures): every threshold the summary misses, each naming the request(s), the measured value,
    the threshold and by how much. Failed requests and the tool call are always checked."""
    thresholds = thresholds or {}
    rows = summary["requests"]
    failures = [f"{r['name']}: request failed: {r['error']}" for r in rows if r.get("error")]

    hot_ttft_max = thresholds.get("hot_ttft_max_s")
    if hot_ttft_max is not None:
        for row in rows:
            if row["kind"] not in HOT_KINDS or row.get("error"):
                continue
            ttft = row["ttft_s"]
            if ttft is None:
                failures.append(f"{row['name']}: no token arrived, TTFT not measured (limit {hot_ttft_max:.3f} s)")
            elif ttft > hot_ttft_max:
                failures.append(
                    f"{row['name']}: TTFT {ttft:.3f} s > {hot_ttft_max:.3f} s (over by {ttft - hot_ttft_max:.3f} s)"
                )

    hit_min = thresholds.get("hit_ratio_min")
    if hit_min is not None:
        for row in rows:
            if row["kind"] not in CACHED_KINDS or row.get("error"):
                continue
            ratio = row["hit_ratio"]
            if ratio is None:
                failures.append(
                    f"{row['name']}: hit ratio not measured (no usage.prompt_tokens_details."
                    f"cached_tokens: is --enable-prompt-tokens-details on?) (minimum {hit_min:.2f})"
                )
            elif ratio < hit_min:
                failures.append(
                    f"{row['name']}: hit ratio {ratio:.2f} < {hit_min:.2f} (short by "
                    f"{hit_min - ratio:.2f}; {row['cached_tokens']} of {row['prompt_tokens']} "
                    f"prompt tokens cached)"
                )

    min_ratio = thresholds.get("decode_tps_min_ratio")
    before = (previous or {}).get("decode_tps")
    if min_ratio is not None and before:
        floor = min_ratio * before
        measured = [r["name"] for r in rows if r["decode_tps"] is not None]
        tps = summary.get("decode_tps")
        if tps is None:
            failures.append(
                f"decode: no request produced two tokens, speed not measured "
                f"(floor {floor:.1f} tok/s = {min_ratio:.2f} x previous {before:.1f})"
            )
        elif tps < floor:
            failures.append(
                f"decode (median of {', '.join(measured)}): {tps:.1f} tok/s < {floor:.1f} tok/s "
                f"= {min_ratio:.2f} x previous {before:.1f} (short by {floor - tps:.1f} tok/s)"
            )

    spec_min = thresholds.get("spec_acceptance_min")
    if spec_min is not None:
        rate = summary.get("spec_decode_acceptance")
        if rate is None:
            failures.append(
                f"spec decode (all requests): acceptance rate not measured, "
                f"{COUNTERS['spec_decode_draft_tokens']} did not move (minimum {spec_min:.2f})"
            )
        elif rate < spec_min:
            failures.append(
                f"spec decode (all requests): acceptance rate {rate:.2f} < {spec_min:.2f} "
                f"(short by {spec_min - rate:.2f})"
            )

    for row in rows:
        if row["kind"] == "tool" and not row["tool_call_ok"] and not row.get("error"):
            failures.append(f"{row['name']}: {row['tool_call_problem']}")
    if not any(row["kind"] == "tool" for row in rows):
        failures.append("tool-call: no tool-call request in the measurements")
    return not failures, failures
