"""Acceptance gate core: /metrics parsing, counter deltas, the request plan, the summary and the verdict.

The last tests drive module_utils/openai_client.py's stream reader (the gate's client) against a local fake server
(no engine)."""

import json
import re

import pytest
from ansible.module_utils.acceptance import (
    COUNTERS,
    WORDS,
    counter_deltas,
    evaluate,
    parse_metrics,
    request_plan,
    summarize,
)
from ansible.module_utils.openai_client import ServerUnreachable, stream_chat

from tests.fake_vllm import LoopbackServer

# vLLM 0.32 exposition (prometheus_client: HELP/TYPE lines, `_total` counters with `_created` twins) of a
# server with two engines (data parallel) and MTP, which is why every sample has an `engine` label set.
METRICS_BEFORE = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="qwen {v2}"} 0.0
vllm:num_requests_running{engine="1",model_name="qwen {v2}"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="qwen {v2}"} NaN
vllm:kv_cache_usage_perc{engine="1",model_name="qwen {v2}"} 0.25
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="qwen {v2}"} 2816.0
vllm:prefix_cache_queries_total{engine="1",model_name="qwen {v2}"} 1000.0
# HELP vllm:prefix_cache_queries_created Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_created gauge
vllm:prefix_cache_queries_created{engine="0",model_name="qwen {v2}"} 1.796110087384585e+09
vllm:prefix_cache_queries_created{engine="1",model_name="qwen {v2}"} 1.796110087384586e+09
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="qwen {v2}"} 1536.0
vllm:prefix_cache_hits_total{engine="1",model_name="qwen {v2}"} 512.0
# HELP vllm:prefix_cache_hits_created Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_created gauge
vllm:prefix_cache_hits_created{engine="0",model_name="qwen {v2}"} 1.796110087384605e+09
vllm:prefix_cache_hits_created{engine="1",model_name="qwen {v2}"} 1.796110087384606e+09
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="qwen {v2}"} 300.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="qwen {v2}"} 0.0
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="qwen {v2}"} 120.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="qwen {v2}"} 0.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="qwen {v2}",position="0"} 80.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="qwen {v2}",position="1"} 40.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="qwen {v2}"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="qwen {v2}"} 2.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="qwen {v2}"} 2.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="qwen {v2}"} 10.7
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="128",cache_dtype="auto",note="a \\"quoted\\" } brace"} 1.0
"""

# The same server after the gate: engine 0 took every request.
METRICS_AFTER = (
    METRICS_BEFORE.replace(
        'queries_total{engine="0",model_name="qwen {v2}"} 2816.0',
        'queries_total{engine="0",model_name="qwen {v2}"} 14816.0',
    )
    .replace(
        'hits_total{engine="0",model_name="qwen {v2}"} 1536.0', 'hits_total{engine="0",model_name="qwen {v2}"} 9216.0'
    )
    .replace(
        'draft_tokens_total{engine="0",model_name="qwen {v2}"} 300.0',
        'draft_tokens_total{engine="0",model_name="qwen {v2}"} 900.0',
    )
    .replace(
        'accepted_tokens_total{engine="0",model_name="qwen {v2}"} 120.0',
        'accepted_tokens_total{engine="0",model_name="qwen {v2}"} 390.0',
    )
)


def test_parse_metrics_sums_label_sets_and_skips_comments_created_and_non_numeric():
    metrics = parse_metrics(METRICS_BEFORE + 'vllm:broken_sample{engine="0"} not-a-number\n')
    assert metrics["vllm:prefix_cache_queries_total"] == 2816.0 + 1000.0
    assert metrics["vllm:prefix_cache_hits_total"] == 1536.0 + 512.0
    assert metrics["vllm:spec_decode_num_accepted_tokens_per_pos_total"] == 80.0 + 40.0
    assert metrics["vllm:time_to_first_token_seconds_bucket"] == 1.0 + 2.0
    assert metrics["vllm:kv_cache_usage_perc"] == 0.25, "the NaN sample is left out, not summed"
    assert metrics["vllm:cache_config_info"] == 1.0, "a quoted '}' inside a label value does not end the labels"
    assert not [name for name in metrics if name.endswith("_created")]
    assert "vllm:broken_sample" not in metrics
    assert not [name for name in metrics if name.startswith("#") or "{" in name]


def test_parse_metrics_reads_samples_without_labels_and_with_timestamps():
    assert parse_metrics("up 1\nprocess_cpu_seconds_total 12.5 1700000000000\n") == {
        "up": 1.0,
        "process_cpu_seconds_total": 12.5,
    }


def test_counter_deltas_subtract_summed_counters():
    deltas = counter_deltas(parse_metrics(METRICS_BEFORE), parse_metrics(METRICS_AFTER))
    assert deltas == {
        "prefix_cache_queries": 14816.0 - 2816.0,
        "prefix_cache_hits": 9216.0 - 1536.0,
        "spec_decode_draft_tokens": 900.0 - 300.0,
        "spec_decode_accepted_tokens": 390.0 - 120.0,
    }


def test_counter_deltas_are_unknown_for_missing_or_reset_counters():
    no_spec = "\n".join(line for line in METRICS_AFTER.splitlines() if "spec_decode" not in line)
    before = parse_metrics(METRICS_BEFORE)
    restarted = dict(parse_metrics(METRICS_AFTER), **{COUNTERS["prefix_cache_hits"]: 10.0})
    deltas = counter_deltas(before, parse_metrics(no_spec))
    assert deltas["spec_decode_draft_tokens"] is None and deltas["spec_decode_accepted_tokens"] is None
    assert deltas["prefix_cache_hits"] == 9216.0 - 1536.0
    assert counter_deltas(before, restarted)["prefix_cache_hits"] is None
    assert counter_deltas({}, parse_metrics(METRICS_AFTER))["prefix_cache_queries"] == 14816.0 + 1000.0


def texts(plan):
    return {entry["name"]: entry["messages"][0]["content"] for entry in plan}


def common_prefix(a, b):
    """Number of leading characters a and b share."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def test_plan_order_kinds_and_sizes():
    plan = request_plan({"long_prompt_words": 300, "max_tokens": 8, "hit_ratio_min": 0.5}, "n0nce")
    assert [(e["name"], e["kind"]) for e in plan] == [
        ("short", "short"),
        ("cold", "cold"),
        ("hot-1", "hot"),
        ("hot-2", "hot"),
        ("session-a", "session"),
        ("session-b", "session"),
        ("revisit-a", "revisit"),
        ("revisit-b", "revisit"),
        ("tool-call", "tool"),
    ]
    assert {e["max_tokens"] for e in plan if e["kind"] != "tool"} == {8}
    body = texts(plan)["cold"].split("\n")[0]
    assert len(body.split()) == 300 + 3, "nonce, 'Document', 'C.' and the 300 words"
    default = texts(request_plan({}, "n0nce"))["cold"].split("\n")[0]
    assert len(default.split()) == 1200 + 3
    assert {e["max_tokens"] for e in request_plan(None, "n0nce") if e["kind"] != "tool"} == {16}


def test_plan_hot_and_revisits_repeat_their_text_and_sessions_share_no_long_prefix():
    nonce = "a1b2c3d4e5f6"
    by_name = texts(request_plan({"long_prompt_words": 400}, nonce))
    assert by_name["hot-1"] == by_name["cold"] and by_name["hot-2"] == by_name["cold"]
    assert by_name["revisit-a"] == by_name["session-a"] and by_name["revisit-b"] == by_name["session-b"]
    shared_header = len(f"{nonce} Document ")
    distinct = [by_name["cold"], by_name["session-a"], by_name["session-b"]]
    for i, first in enumerate(distinct):
        for second in distinct[i + 1 :]:
            assert first != second
            assert common_prefix(first, second) <= shared_header, "only the nonce header may be shared"
            # and no long stretch further on either: the word sequences differ at most positions
            pairs = list(zip(first.split()[3:-10], second.split()[3:-10], strict=False))
            assert sum(a == b for a, b in pairs) < len(pairs) / 4


def test_plan_is_deterministic_and_the_nonce_leads_the_text():
    first = texts(request_plan({"long_prompt_words": 200}, "run-one"))
    again = texts(request_plan({"long_prompt_words": 200}, "run-one"))
    other = texts(request_plan({"long_prompt_words": 200}, "run-two"))
    assert first == again
    for name in ("cold", "session-a", "session-b"):
        assert first[name].startswith("run-one ") and other[name].startswith("run-two ")
        assert common_prefix(first[name], other[name]) == len("run-")
        assert first[name][len("run-one") :] == other[name][len("run-two") :], "only the nonce differs"


def test_plan_tool_call_forces_a_named_function_with_a_json_schema():
    (tool,) = [e for e in request_plan({}, "n") if e["kind"] == "tool"]
    name = tool["tools"][0]["function"]["name"]
    assert tool["tool_choice"] == {"type": "function", "function": {"name": name}}
    assert tool["tools"][0]["function"]["parameters"]["type"] == "object"
    assert tool["max_tokens"] >= 16


def test_words_are_64_distinct_so_a_byte_picks_without_bias():
    assert len(WORDS) == 64 and len(set(WORDS)) == 64


def measurement(name, kind, ttft, last, prompt, completion, cached, **extra):
    row = dict(
        name=name,
        kind=kind,
        ttft_s=ttft,
        last_token_s=last,
        prompt_tokens=prompt,
        completion_tokens=completion,
        cached_tokens=cached,
        finish_reason="length",
        tool_calls=[],
    )
    return dict(row, **extra)


GOOD_TOOL = [{"name": "get_weather", "arguments": '{"city": "Paris"}'}]
MEASUREMENTS = [
    measurement("short", "short", 0.10, 0.40, 20, 4, 0),
    measurement("cold", "cold", 2.00, 3.50, 1500, 16, 0),
    measurement("hot-1", "hot", 0.30, 1.80, 1500, 16, 1408),
    measurement("hot-2", "hot", 0.25, 1.25, 1500, 16, 1280),
    measurement("session-a", "session", 1.90, 3.40, 1490, 16, 0),
    measurement("session-b", "session", 1.95, 3.45, 1495, 16, 0),
    measurement("revisit-a", "revisit", 0.28, 1.78, 1490, 16, 1408),
    measurement("revisit-b", "revisit", 0.27, 1.77, 1495, 1, 1408),
    measurement("tool-call", "tool", 0.20, 0.60, 40, 9, 0, tool_calls=GOOD_TOOL),
]
DELTAS = {
    "prefix_cache_queries": 12000.0,
    "prefix_cache_hits": 7680.0,
    "spec_decode_draft_tokens": 600.0,
    "spec_decode_accepted_tokens": 270.0,
}


def test_summarize_per_request_figures():
    summary = summarize(MEASUREMENTS, DELTAS)
    rows = {row["name"]: row for row in summary["requests"]}
    assert rows["hot-2"]["decode_tps"] == pytest.approx((16 - 1) / (1.25 - 0.25), abs=0.01)
    assert rows["short"]["decode_tps"] == pytest.approx((4 - 1) / (0.40 - 0.10), abs=0.01)
    assert rows["revisit-b"]["decode_tps"] is None, "one token gives no decode interval"
    assert rows["hot-1"]["hit_ratio"] == pytest.approx(1408 / 1500, abs=1e-4)
    assert rows["hot-2"]["hit_ratio"] == pytest.approx(1280 / 1500, abs=1e-4)
    assert rows["cold"]["hit_ratio"] == 0
    assert (rows["hot-1"]["prompt_tokens"], rows["hot-1"]["completion_tokens"], rows["hot-1"]["cached_tokens"]) == (
        1500,
        16,
        1408,
    )
    assert rows["tool-call"]["tool_call_ok"] is True


def test_summarize_aggregates():
    summary = summarize(MEASUREMENTS, DELTAS)
    decode = sorted([(4 - 1) / 0.30, 15 / 1.5, 15 / 1.5, 15 / 1.0, 15 / 1.5, 15 / 1.5, 15 / 1.5, 8 / 0.40])
    assert summary["cold_ttft_s"] == 2.00
    assert summary["hot_ttft_s"] == max(0.30, 0.25)
    assert summary["hot_hit_ratio"] == pytest.approx(min(1408 / 1500, 1280 / 1500, 1408 / 1490, 1408 / 1495), abs=1e-4)
    assert summary["decode_tps"] == pytest.approx((decode[3] + decode[4]) / 2, abs=0.01)
    assert summary["prefix_cache_hits_delta"] == 7680.0 and summary["prefix_cache_queries_delta"] == 12000.0
    assert summary["metrics_hit_ratio"] == pytest.approx(7680 / 12000, abs=1e-4)
    assert summary["spec_decode_acceptance"] == pytest.approx(270 / 600, abs=1e-4)
    assert summary["tool_call_ok"] is True


def test_summarize_leaves_unmeasured_values_unknown():
    bare = [
        measurement("hot-1", "hot", None, None, 1500, 0, None),
        measurement("tool-call", "tool", None, None, 40, 16, 0),
    ]
    summary = summarize(
        bare,
        {
            "prefix_cache_queries": 0.0,
            "prefix_cache_hits": 0.0,
            "spec_decode_draft_tokens": None,
            "spec_decode_accepted_tokens": None,
        },
    )
    assert summary["requests"][0]["hit_ratio"] is None and summary["hot_ttft_s"] is None
    assert summary["decode_tps"] is None and summary["metrics_hit_ratio"] is None
    assert summary["spec_decode_acceptance"] is None
    assert summary["tool_call_ok"] is False
    assert "no tool call returned" in summary["requests"][1]["tool_call_problem"]


def test_evaluate_passes_when_every_threshold_holds():
    summary = summarize(MEASUREMENTS, DELTAS)
    thresholds = {
        "hot_ttft_max_s": 0.5,
        "hit_ratio_min": 0.85,
        "decode_tps_min_ratio": 0.9,
        "spec_acceptance_min": 0.4,
        "long_prompt_words": 1200,
        "rollback": True,
    }
    assert evaluate(summary, thresholds, previous={"decode_tps": 10.5}) == (True, [])
    assert evaluate(summary, {}) == (True, [])


def test_evaluate_lists_every_failure_with_request_value_threshold_and_miss():
    broken_tool = [{"name": "get_weather", "arguments": '{"city": "Par'}]
    measurements = [dict(m, tool_calls=broken_tool) if m["kind"] == "tool" else m for m in MEASUREMENTS]
    measurements[3] = measurement("hot-2", "hot", 0.90, 1.90, 1500, 16, 0)
    summary = summarize(measurements, DELTAS)
    thresholds = {
        "hot_ttft_max_s": 0.29,
        "hit_ratio_min": 0.9,
        "decode_tps_min_ratio": 0.95,
        "spec_acceptance_min": 0.6,
    }
    passed, failures = evaluate(summary, thresholds, previous={"decode_tps": 20.0})
    median = summary["decode_tps"]
    assert median == pytest.approx(((15 / 1.5) + (15 / 1.5)) / 2, abs=0.01), "six at 10 tok/s, one 15, one 20"
    assert passed is False
    assert failures == [
        "hot-1: TTFT 0.300 s > 0.290 s (over by 0.010 s)",
        "hot-2: TTFT 0.900 s > 0.290 s (over by 0.610 s)",
        "hot-2: hit ratio 0.00 < 0.90 (short by 0.90; 0 of 1500 prompt tokens cached)",
        "decode (median of short, cold, hot-1, hot-2, session-a, session-b, revisit-a, tool-call): "
        f"{median:.1f} tok/s < 19.0 tok/s = 0.95 x previous 20.0 (short by {19.0 - median:.1f} tok/s)",
        f"spec decode (all requests): acceptance rate {270 / 600:.2f} < 0.60 (short by {0.6 - 270 / 600:.2f})",
        failures[-1],
    ]
    assert failures[-1].startswith("tool-call: arguments are not valid JSON (")
    assert failures[-1].endswith("""'{"city": "Par'""")


def test_evaluate_fails_unmeasured_values_and_failed_requests():
    measurements = [
        measurement("hot-1", "hot", None, None, 1500, 0, None, error="HTTP 500 Internal Server Error"),
        measurement("hot-2", "hot", 0.2, 0.5, 1500, 4, None),
        measurement("tool-call", "tool", 0.2, 0.5, 40, 4, 0, tool_calls=[{"name": "other", "arguments": "{}"}]),
    ]
    summary = summarize(measurements, {"spec_decode_draft_tokens": None})
    passed, failures = evaluate(summary, {"hit_ratio_min": 0.5, "spec_acceptance_min": 0.5}, previous=None)
    assert passed is False
    assert failures == [
        "hot-1: request failed: HTTP 500 Internal Server Error",
        "hot-2: hit ratio not measured (no usage.prompt_tokens_details.cached_tokens: is "
        "--enable-prompt-tokens-details on?) (minimum 0.50)",
        "spec decode (all requests): acceptance rate not measured, vllm:spec_decode_num_draft_tokens_total did "
        "not move (minimum 0.50)",
        "tool-call: called 'other' instead of the forced 'get_weather'",
    ]


def test_evaluate_skips_the_decode_ratio_without_a_previous_summary():
    summary = summarize(MEASUREMENTS, DELTAS)
    assert evaluate(summary, {"decode_tps_min_ratio": 100.0}) == (True, [])
    assert evaluate(summary, {"decode_tps_min_ratio": 100.0}, previous={"hot_ttft_s": 1.0}) == (True, [])
    assert evaluate(summary, {"decode_tps_min_ratio": 100.0}, previous={"decode_tps": 1.0})[0] is False


# --- module_utils/openai_client.py's stream reader against a fake OpenAI-compatible server -----------------


def sse(*chunks):
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"


TOOL_STREAM = sse(
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
    {
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"ci'},
                        }
                    ]
                },
            }
        ]
    },
    {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": 'ty": "Paris"}'}}]}}]},
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    {
        "choices": [],
        "usage": {
            "prompt_tokens": 40,
            "completion_tokens": 9,
            "total_tokens": 49,
            "prompt_tokens_details": {"cached_tokens": 32},
        },
    },
)


@pytest.fixture()
def fake_server():
    """Streams TOOL_STREAM; refuses max_tokens 1 with HTTP 400. Yields the URL and the (Authorization, body) seen."""
    seen = []

    def answer(request):
        seen.append((request.headers.get("Authorization"), request.body))
        if request.body["max_tokens"] == 1:
            return 400, {}, [b"max_tokens too small"]
        return 200, {"Content-Type": "text/event-stream"}, [TOOL_STREAM.encode()]

    server = LoopbackServer(answer)
    yield server.url, seen
    server.close()


def test_stream_chat_accumulates_tool_call_deltas_and_reads_usage(fake_server):
    url, seen = fake_server
    (planned,) = [e for e in request_plan({}, "n") if e["kind"] == "tool"]
    result = stream_chat(url, "tiny-llama", planned, "sk-test", 30)
    assert result["tool_calls"] == [{"name": "get_weather", "arguments": '{"city": "Paris"}'}]
    assert (result["prompt_tokens"], result["completion_tokens"], result["cached_tokens"]) == (40, 9, 32)
    assert result["finish_reason"] == "stop"
    assert 0 <= result["ttft_s"] <= result["last_token_s"], "the role chunk with empty content is not a token"
    auth, body = seen[0]
    assert auth == "Bearer sk-test"
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["tool_choice"] == planned["tool_choice"] and body["model"] == "tiny-llama"


def test_stream_chat_reports_http_errors_and_unreachable_servers(fake_server):
    url, _ = fake_server
    result = stream_chat(url, "m", {"name": "short", "kind": "short", "messages": [], "max_tokens": 1}, None, 30)
    assert result["error"].startswith("HTTP 400 ")
    with pytest.raises(ServerUnreachable, match=re.escape("short: POST http://127.0.0.1:9/v1/chat/completions")):
        stream_chat(
            "http://127.0.0.1:9", "m", {"name": "short", "kind": "short", "messages": [], "max_tokens": 4}, None, 5
        )
