"""Seed 000's benchmark report: the request plan, rows from per-request measurements, the tables, the comparison."""

import statistics

import pytest
from ansible.module_utils.bench_report import (
    NOISE,
    QUESTION,
    compare,
    comparison_table,
    decode_tps,
    markdown_table,
    newest_run_of,
    plan,
    problems,
    rows,
)


def measured(name, kind, words, ttft, last, prompt=1300, completion=64, cached=0, **extra):
    return dict(
        {
            "name": name,
            "kind": kind,
            "input_words": words,
            "ttft_s": ttft,
            "last_token_s": last,
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "cached_tokens": cached,
        },
        **extra,
    )


# Two lengths as a run sends them; the warm-ups carry figures that would change every row if they were counted.
RUN = [
    measured("warmup-1000", "warmup", 1000, 9.0, 9.5, prompt=30),
    measured("cold-1000", "cold", 1000, 1.20, 2.46, prompt=1310, cached=0),
    measured("hot-1-1000", "hot", 1000, 0.30, 1.56, prompt=1310, cached=1280),
    measured("hot-2-1000", "hot", 1000, 0.26, 1.61, prompt=1310, cached=1296),
    measured("warmup-4000", "warmup", 4000, 9.0, 9.5, prompt=30),
    measured("cold-4000", "cold", 4000, 5.00, 6.40, prompt=5210, cached=0),
    measured("hot-1-4000", "hot", 4000, 0.40, 1.80, prompt=5210, cached=5200),
    measured("hot-2-4000", "hot", 4000, 0.44, 1.90, prompt=5210, cached=5184),
]


def test_plan_sends_warmup_cold_then_the_identical_prompt_twice_per_length():
    requests = plan([1000, 4000], 64, "n0nce")
    assert [(r["name"], r["kind"], r["input_words"]) for r in requests] == [
        ("warmup-1000", "warmup", 1000),
        ("cold-1000", "cold", 1000),
        ("hot-1-1000", "hot", 1000),
        ("hot-2-1000", "hot", 1000),
        ("warmup-4000", "warmup", 4000),
        ("cold-4000", "cold", 4000),
        ("hot-1-4000", "hot", 4000),
        ("hot-2-4000", "hot", 4000),
    ]
    assert all(r["max_tokens"] == 64 and r["ignore_eos"] is True for r in requests)
    for start in (0, 4):
        warmup, cold, hot_1, hot_2 = (r["messages"][0]["content"] for r in requests[start : start + 4])
        assert cold == hot_1 == hot_2
        assert cold.startswith(f"n0nce-{requests[start]['input_words']}\n") and cold.endswith(QUESTION)
        assert not warmup.startswith("n0nce") and len(warmup.split()) < 40


def test_plan_prompt_has_the_requested_words_and_only_the_nonce_differs_between_runs():
    (cold,) = [r for r in plan([1000], 8, "first") if r["kind"] == "cold"]
    (again,) = [r for r in plan([1000], 8, "second") if r["kind"] == "cold"]
    text, text_again = cold["messages"][0]["content"], again["messages"][0]["content"]
    document = text.split("\n")[1]
    assert len(document.split()) == 1000
    assert text.startswith("first-1000\n") and text_again.startswith("second-1000\n")
    assert text.split("\n", 1)[1] == text_again.split("\n", 1)[1], "same text every run: like with like"
    (other,) = [r for r in plan([1200], 8, "first") if r["kind"] == "cold"]
    assert other["messages"][0]["content"].split("\n")[1].split()[:50] != document.split()[:50]


def test_decode_tps_leaves_the_first_token_to_the_prefill():
    assert decode_tps(measured("c", "cold", 1, 1.0, 3.0, completion=65)) == pytest.approx(64 / 2.0)
    assert decode_tps(measured("c", "cold", 1, 1.0, 1.0, completion=65)) is None
    assert decode_tps(measured("c", "cold", 1, 1.0, 3.0, completion=1)) is None
    assert decode_tps(measured("c", "cold", 1, None, None, completion=None, error="HTTP 400")) is None


def test_rows_are_computed_from_the_cold_and_hot_measurements_only():
    table = rows(RUN)
    assert [row["input_words"] for row in table] == [1000, 4000]
    for row in table:
        cold, hot_1, hot_2 = [m for m in RUN if m["input_words"] == row["input_words"] and m["kind"] != "warmup"]
        speeds = [(m["completion_tokens"] - 1) / (m["last_token_s"] - m["ttft_s"]) for m in (cold, hot_1, hot_2)]
        assert row["prompt_tokens"] == cold["prompt_tokens"]
        assert row["cold_ttft_s"] == cold["ttft_s"]
        assert row["hot_ttft_s"] == pytest.approx((hot_1["ttft_s"] + hot_2["ttft_s"]) / 2)
        assert row["hot_cached_tokens"] == min(hot_1["cached_tokens"], hot_2["cached_tokens"])
        assert row["decode_tps"] == pytest.approx(statistics.mean(speeds))
    assert table[0]["hot_cached_tokens"] == 1280 and table[1]["hot_cached_tokens"] == 5184


def test_rows_use_what_the_failed_requests_left_and_none_when_nothing_was_measured():
    failed = {
        "ttft_s": None,
        "last_token_s": None,
        "prompt_tokens": None,
        "completion_tokens": None,
        "cached_tokens": None,
        "error": "HTTP 400 Bad Request",
    }
    run = [
        dict(m, **failed) if m["name"] in ("hot-2-1000", "cold-4000", "hot-1-4000", "hot-2-4000") else m for m in RUN
    ]
    first, second = rows(run)
    hot_1 = RUN[2]
    assert first["hot_ttft_s"] == hot_1["ttft_s"] and first["hot_cached_tokens"] == hot_1["cached_tokens"]
    assert first["decode_tps"] == pytest.approx(
        statistics.mean([63 / (m["last_token_s"] - m["ttft_s"]) for m in (RUN[1], hot_1)])
    )
    assert {
        key: second[key] for key in ("prompt_tokens", "cold_ttft_s", "hot_ttft_s", "hot_cached_tokens", "decode_tps")
    } == dict.fromkeys(("prompt_tokens", "cold_ttft_s", "hot_ttft_s", "hot_cached_tokens", "decode_tps"))


def test_problems_name_failed_requests_and_wrong_output_lengths():
    assert problems(RUN, 64) == []
    run = [dict(RUN[0], error="HTTP 400 Bad Request: too long"), dict(RUN[1], completion_tokens=12)] + RUN[2:]
    assert problems(run, 64) == [
        "warmup-1000: HTTP 400 Bad Request: too long",
        "cold-1000: decoded 12 tokens, not max_tokens 64",
    ]


def test_markdown_table_has_one_formatted_line_per_length_and_marks_missing_figures():
    table = rows(RUN)
    table[1]["hot_cached_tokens"] = None
    lines = markdown_table(table).splitlines()
    assert lines[0] == (
        "| input words | prompt tokens | cold TTFT (s) | hot TTFT (s) | hot cached tokens | decode tok/s |"
    )
    assert len(lines) == 2 + 2
    assert lines[2] == f"| 1000 | 1310 | 1.200 | 0.280 | 1280 | {table[0]['decode_tps']:.1f} |"
    assert lines[3].split(" | ")[4] == "n/a"


def earlier_rows(**changes):
    """RUN's first row as an earlier run, with some figures replaced."""
    return [dict(rows(RUN)[0], **changes)]


def verdicts(comparison):
    return {entry["metric"]: entry["verdict"] for entry in comparison}


def test_compare_names_better_and_worse_in_each_metric_direction():
    new = rows(RUN)[:1]
    # Earlier: cold TTFT 10 % higher (now better), decode 10 % higher (now worse), hot TTFT 10 % lower (worse),
    # cached tokens 10 % lower (now better).
    old = new[0]
    earlier = earlier_rows(
        cold_ttft_s=old["cold_ttft_s"] / 0.9,
        decode_tps=old["decode_tps"] / 0.9,
        hot_ttft_s=old["hot_ttft_s"] / 1.1,
        hot_cached_tokens=1164,
    )
    comparison = compare(new, earlier)
    assert verdicts(comparison) == {
        "cold_ttft_s": "better",
        "hot_ttft_s": "worse",
        "hot_cached_tokens": "better",
        "decode_tps": "worse",
    }
    by_metric = {entry["metric"]: entry for entry in comparison}
    assert by_metric["cold_ttft_s"]["ratio"] == pytest.approx(0.9)
    assert by_metric["cold_ttft_s"]["change_pct"] == pytest.approx(-10.0)
    assert by_metric["hot_ttft_s"]["change_pct"] == pytest.approx(10.0)
    assert {e["metric"]: e["better"] for e in comparison} == {
        "cold_ttft_s": "lower",
        "hot_ttft_s": "lower",
        "hot_cached_tokens": "higher",
        "decode_tps": "higher",
    }
    assert by_metric["decode_tps"]["earlier"] == pytest.approx(old["decode_tps"] / 0.9)
    assert by_metric["decode_tps"]["new"] == old["decode_tps"]


@pytest.mark.parametrize("factor", [1.02, 0.98])
def test_compare_marks_changes_below_the_noise_threshold_in_both_directions(factor):
    new = rows(RUN)[:1]
    old = new[0]
    earlier = earlier_rows(
        cold_ttft_s=old["cold_ttft_s"] * factor,
        hot_ttft_s=old["hot_ttft_s"] * factor,
        decode_tps=old["decode_tps"] * factor,
    )
    assert verdicts(compare(new, earlier)) == {
        "cold_ttft_s": NOISE,
        "hot_ttft_s": NOISE,
        "hot_cached_tokens": NOISE,
        "decode_tps": NOISE,
    }
    # The same 2 % change beyond a 1 % threshold is a verdict, and its direction follows the metric.
    loose = verdicts(compare(new, earlier, noise_pct=1.0))
    assert loose["cold_ttft_s"] == ("better" if factor > 1 else "worse")
    assert loose["decode_tps"] == ("worse" if factor > 1 else "better")


def test_compare_skips_lengths_not_measured_before_and_has_no_ratio_without_a_figure():
    new = rows(RUN)
    comparison = compare(new, earlier_rows(hot_cached_tokens=0, decode_tps=None))
    assert {entry["input_words"] for entry in comparison} == {1000}
    by_metric = {entry["metric"]: entry for entry in comparison}
    for metric in ("hot_cached_tokens", "decode_tps"):
        assert (by_metric[metric]["ratio"], by_metric[metric]["verdict"]) == (None, None)
    assert by_metric["cold_ttft_s"]["verdict"] == NOISE


def test_comparison_table_shows_direction_ratio_change_and_verdict():
    new = rows(RUN)[:1]
    old = new[0]
    earlier = earlier_rows(cold_ttft_s=old["cold_ttft_s"] / 0.8, decode_tps=None)
    lines = comparison_table(compare(new, earlier)).splitlines()
    assert lines[0] == "| input words | metric | earlier | new | new/earlier | change | noise band | verdict |"
    assert len(lines) == 2 + 4
    assert lines[2] == ("| 1000 | cold TTFT (s), lower is better | 1.500 | 1.200 | 0.800 | -20.0 % | ±3.0 % | better |")
    assert lines[3] == (
        "| 1000 | hot TTFT (s), lower is better | 0.280 | 0.280 | 1.000 | +0.0 % | ±3.0 % | ~ (noise) |"
    )
    assert lines[5].startswith("| 1000 | decode tok/s, higher is better | n/a | ")
    assert lines[5].endswith("| n/a | n/a | ±3.0 % | n/a |")


def repeated_run(cold_ttfts, hot_ttfts, words=1000):
    """A run of one length with one repeat per cold TTFT; hot TTFTs are per repeat (both hot requests alike)."""
    run = [measured(f"warmup-{words}", "warmup", words, 9.0, 9.5, prompt=30, repeat=1)]
    for repeat, (cold, hot) in enumerate(zip(cold_ttfts, hot_ttfts, strict=True), start=1):
        run += [
            measured(f"cold.{repeat}-{words}", "cold", words, cold, cold + 1.0, prompt=1310, repeat=repeat),
            measured(
                f"hot-1.{repeat}-{words}",
                "hot",
                words,
                hot,
                hot + 1.0,
                prompt=1310,
                cached=1296 - repeat,
                repeat=repeat,
            ),
            measured(f"hot-2.{repeat}-{words}", "hot", words, hot, hot + 1.0, prompt=1310, cached=1296, repeat=repeat),
        ]
    return run


def test_plan_repeats_cold_and_hot_with_a_new_nonce_each_time_after_one_warmup():
    requests = plan([1000], 8, "n0nce", repeats=3)
    assert [(r["name"], r["repeat"]) for r in requests] == [
        ("warmup-1000", 1),
        ("cold.1-1000", 1),
        ("hot-1.1-1000", 1),
        ("hot-2.1-1000", 1),
        ("cold.2-1000", 2),
        ("hot-1.2-1000", 2),
        ("hot-2.2-1000", 2),
        ("cold.3-1000", 3),
        ("hot-1.3-1000", 3),
        ("hot-2.3-1000", 3),
    ]
    colds = [r["messages"][0]["content"] for r in requests if r["kind"] == "cold"]
    assert [text.split("\n")[0] for text in colds] == ["n0nce.1-1000", "n0nce.2-1000", "n0nce.3-1000"]
    assert len({text.split("\n", 1)[1] for text in colds}) == 1, "only the nonce differs between repeats"


def test_rows_take_the_median_over_repeats_and_report_the_spread():
    (row,) = rows(repeated_run([1.0, 1.4, 1.1], [0.20, 0.30, 0.25]))
    assert row["repeats"] == 3
    assert row["cold_ttft_s"] == pytest.approx(1.1) and row["hot_ttft_s"] == pytest.approx(0.25)
    assert row["hot_cached_tokens"] == 1293, "cached tokens: the smallest of any repeat"
    assert row["spread_pct"]["cold_ttft_s"] == pytest.approx((1.4 - 1.0) / 1.1 * 100)
    assert row["spread_pct"]["hot_ttft_s"] == pytest.approx((0.30 - 0.20) / 0.25 * 100)
    assert rows(RUN)[0]["spread_pct"] == {} and rows(RUN)[0]["repeats"] == 1
    table = markdown_table([row]).splitlines()
    assert "Medians over the repeats; their spread, (max - min) / median:" in table
    assert table[-1].startswith(f"| 1000 | 3 | {(1.4 - 1.0) / 1.1 * 100:.1f} % | 40.0 % | ")


def test_a_change_inside_the_measured_spread_is_noise_and_outside_it_a_verdict():
    noisy = rows(repeated_run([1.0, 1.2, 1.1], [0.20, 0.30, 0.25]))  # cold spread 18 %, hot spread 40 %
    faster = rows(repeated_run([0.95, 0.95, 0.95], [0.10, 0.10, 0.10]))  # -13.6 % cold, -60 % hot
    by_metric = {entry["metric"]: entry for entry in compare(faster, noisy)}
    assert by_metric["cold_ttft_s"]["noise_band_pct"] == pytest.approx(0.2 / 1.1 * 100)
    assert by_metric["cold_ttft_s"]["verdict"] == NOISE, "-13.6 % lies inside the earlier run's 18.2 % spread"
    assert by_metric["hot_ttft_s"]["verdict"] == "better"
    assert by_metric["decode_tps"]["noise_band_pct"] == 3.0, "no spread measured: the fixed threshold"


def test_newest_run_of_picks_the_newest_run_measured_on_that_deployment():
    runs = [
        {"created_utc": "20261201T100000Z", "deployment": {"id": "A"}, "path": "a1"},
        {"created_utc": "20261201T120000Z", "deployment": {"id": "A"}, "path": "a2"},
        {"created_utc": "20261201T130000Z", "deployment": {"id": "B"}, "path": "b"},
        {"created_utc": "20261201T140000Z", "deployment": None, "path": "none"},
        {"created_utc": "20261201T150000Z", "path": "older format"},
    ]
    assert newest_run_of(runs, "A")["path"] == "a2"
    assert newest_run_of(runs, "B")["path"] == "b"
    assert newest_run_of(runs, "C") is None


def test_every_request_of_a_run_carries_the_runs_user_for_a_session_affine_router():
    planned = plan([100, 200], 8, "n0nce", repeats=2)
    assert {request["user"] for request in planned} == {"spark-serve-bench-n0nce"}
    assert plan([100], 8, "other")[0]["user"] != planned[0]["user"]
