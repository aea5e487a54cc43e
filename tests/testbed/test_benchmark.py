"""benchmark.yml against the served test-bed pair: the Markdown table must say what the requests measured."""

import json
import statistics

import pytest

from tests.testbed import service_faults as sf
from tests.testbed.helpers import ROOT, playbook

pytestmark = pytest.mark.testbed
BENCH = ROOT / ".testbed" / sf.INSTANCE / "spark-serve" / "bench"
LENGTHS, MAX_TOKENS = [100, 350], 16  # ~380 and ~1330 tokens of the 2048 the test bed allows


def bench(*extra):
    before = set(BENCH.glob("bench-*.json"))
    rc, out = playbook(
        "playbooks/benchmark.yml",
        "inventories/testbed-pair",
        "-e",
        json.dumps(
            {"spark_serve_bench_input_words": LENGTHS, "spark_serve_bench_max_tokens": MAX_TOKENS, **dict(extra)}
        ),
    )
    assert rc == 0, out[-4000:]
    (created,) = set(BENCH.glob("bench-*.json")) - before
    return created, out


def table_cells(markdown):
    """{input words: [cells...]} from the report's first Markdown table."""
    rows = {}
    for line in markdown.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0].isdigit():
            rows.setdefault(int(cells[0]), cells)
    return rows


def test_the_table_and_plot_follow_from_the_per_request_measurements(served_pair):
    created, _ = bench()
    data = json.loads(created.read_text())
    cells = table_cells(created.with_suffix(".md").read_text())
    assert created.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(cells) == LENGTHS
    for words in LENGTHS:
        measured = [r for r in data["requests"] if r["input_words"] == words]
        cold = [r for r in measured if r["kind"] == "cold"]
        hot = [r for r in measured if r["kind"] == "hot"]
        assert len(cold) == 1 and len(hot) == 2
        assert all(r["completion_tokens"] == MAX_TOKENS for r in cold + hot), "ignore_eos must fix the output length"
        tps = statistics.mean((r["completion_tokens"] - 1) / (r["last_token_s"] - r["ttft_s"]) for r in cold + hot)
        expected = [
            str(words),
            str(cold[0]["prompt_tokens"]),
            f"{cold[0]['ttft_s']:.3f}",
            f"{statistics.mean(r['ttft_s'] for r in hot):.3f}",
            str(min(r["cached_tokens"] for r in hot)),
            f"{tps:.1f}",
        ]
        assert cells[words] == expected, (cells[words], expected)
        assert cold[0]["cached_tokens"] == 0, "the cold request must really be cold"
    print(f"\n[benchmark] {created.with_suffix('.md').read_text()}")


def test_a_second_run_is_compared_with_the_first_as_ratios(served_pair):
    first, _ = bench()
    deployment = json.loads(first.read_text())["deployment"]
    serving = sorted((ROOT / ".testbed" / sf.INSTANCE / "spark-serve" / "records").glob("*-testbed-pair-*.json"))[-1]
    assert deployment["id"] == serving.stem, "a run names the deployment it measured: the newest record"
    # By deployment id: the newest run measured on it, which is the first one.
    # Repeated: medians and their spread, which widens the noise band where it exceeds the fixed 3 %.
    second, out = bench(("spark_serve_bench_compare_with", deployment["id"]), ("spark_serve_bench_repeats", 2))
    assert json.loads(second.read_text())["compare_with"] == str(first)
    earlier, now = json.loads(first.read_text())["rows"], json.loads(second.read_text())["rows"]
    comparison = json.loads(second.read_text())["comparison"]
    for entry in comparison:
        old = next(r for r in earlier if r["input_words"] == entry["input_words"])[entry["metric"]]
        new = next(r for r in now if r["input_words"] == entry["input_words"])[entry["metric"]]
        if old:
            assert entry["ratio"] == pytest.approx(new / old)
        spread = next(r for r in now if r["input_words"] == entry["input_words"])["spread_pct"].get(entry["metric"], 0)
        assert entry["noise_band_pct"] == pytest.approx(max(3.0, spread))
    assert all(row["repeats"] == 2 for row in now)
    assert [r["repeat"] for r in json.loads(second.read_text())["requests"] if r["kind"] == "cold"] == [1, 2] * 2
    assert {e["input_words"] for e in comparison} == set(LENGTHS)
    assert f"compared with {first}" in out
