"""library/vllm_benchmark.py against a fake OpenAI-compatible server (no engine): what it sends, the rows it
measures from the streams, the Markdown report and the chart file."""

import json

import pytest
from ansible.module_utils.bench_report import compare, comparison_table, markdown_table, rows
from ansible.modules import vllm_benchmark

from tests.fake_vllm import BLOCK, FakeVllm


@pytest.fixture()
def fake_server():
    """tests/fake_vllm.py: streams max_tokens one-word chunks; a prompt seen before reports its whole blocks of BLOCK
    words as cached. Yields the base URL and the server (its requests)."""
    fake = FakeVllm()
    yield f"{fake.url}/", fake
    fake.close()


def test_measure_sends_fixed_length_requests_and_rows_show_cold_and_hot(fake_server):
    url, fake = fake_server
    measurements = vllm_benchmark.measure(url, "tiny-llama", [100, 300], 8, timeout_s=30, nonce="bench-test")
    seen = [body for _, _, body in fake.requests if body]
    assert len(seen) == len(measurements)
    assert [m["name"] for m in measurements] == [
        "warmup-100",
        "cold-100",
        "hot-1-100",
        "hot-2-100",
        "warmup-300",
        "cold-300",
        "hot-1-300",
        "hot-2-300",
    ]
    assert all(
        body["ignore_eos"] is True and body["max_tokens"] == 8 and body["model"] == "tiny-llama" for body in seen
    )
    first, second = rows(measurements)
    for row, cold in ((first, measurements[1]), (second, measurements[5])):
        assert cold["cached_tokens"] == 0
        assert row["prompt_tokens"] == cold["prompt_tokens"]
        assert row["hot_cached_tokens"] == cold["prompt_tokens"] // BLOCK * BLOCK > 0
    assert second["prompt_tokens"] - first["prompt_tokens"] == 200
    assert vllm_benchmark.problems(measurements, 8) == []
    assert vllm_benchmark.problems(measurements, 9)[0] == "warmup-100: decoded 8 tokens, not max_tokens 9"


def test_measure_repeats_and_rows_take_medians_per_length(fake_server):
    url, _ = fake_server
    measurements = vllm_benchmark.measure(url, "tiny-llama", [100], 8, timeout_s=30, nonce="bench-repeat", repeats=3)
    assert [(m["name"], m["repeat"]) for m in measurements if m["kind"] == "cold"] == [
        ("cold.1-100", 1),
        ("cold.2-100", 2),
        ("cold.3-100", 3),
    ]
    assert [m["cached_tokens"] for m in measurements if m["kind"] == "cold"] == [0, 0, 0], "each repeat is cold"
    (row,) = rows(measurements)
    colds = sorted(m["ttft_s"] for m in measurements if m["kind"] == "cold")
    assert row["repeats"] == 3 and row["cold_ttft_s"] == colds[1]
    assert row["spread_pct"]["cold_ttft_s"] == pytest.approx((colds[2] - colds[0]) / colds[1] * 100)


def test_report_markdown_and_chart(tmp_path):
    table_rows = [
        {
            "input_words": 1000,
            "prompt_tokens": 1310,
            "cold_ttft_s": 1.2,
            "hot_ttft_s": 0.3,
            "hot_cached_tokens": 1296,
            "decode_tps": 60.0,
        },
        {
            "input_words": 4000,
            "prompt_tokens": 5210,
            "cold_ttft_s": None,
            "hot_ttft_s": 0.4,
            "hot_cached_tokens": 5184,
            "decode_tps": 58.0,
        },
    ]
    comparison = compare(table_rows, [dict(table_rows[0], cold_ttft_s=1.5)])
    meta = {
        "created_utc": "20261201T080000Z",
        "url": "http://h:8000",
        "model": "m",
        "max_tokens": 64,
        "compare_with": "/tmp/bench-old.json",
        "noise_pct": 3.0,
    }
    text = vllm_benchmark.report_markdown(
        meta, markdown_table(table_rows), comparison_table(comparison), ["cold-4000: HTTP 400"]
    )
    assert markdown_table(table_rows) in text and comparison_table(comparison) in text
    assert "## Compared with /tmp/bench-old.json" in text and "noise band (3.0 %, or the wider spread" in text
    assert text.rstrip().endswith("- cold-4000: HTTP 400")
    without = vllm_benchmark.report_markdown(dict(meta, compare_with=None), markdown_table(table_rows), "", [])
    assert "Compared with" not in without and "Problems" not in without
    png = tmp_path / "bench.png"
    vllm_benchmark.write_png(str(png), table_rows, "m")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare_with_takes_a_run_file_or_a_deployment_id_before_anything_is_sent(tmp_path):
    row = {
        "input_words": 100,
        "prompt_tokens": 130,
        "cold_ttft_s": 0.1,
        "hot_ttft_s": 0.05,
        "hot_cached_tokens": 128,
        "decode_tps": 80.0,
    }

    def run(created, deployment_id, decode_tps):
        path = tmp_path / f"bench-{created}.json"
        path.write_text(
            json.dumps(
                {
                    "created_utc": created,
                    "deployment": {"id": deployment_id},
                    "rows": [dict(row, decode_tps=decode_tps)],
                }
            )
        )
        return str(path)

    older = run("20261201T100000Z", "20261201T095000Z-spark-pair-deploy", 70.0)
    newer = run("20261201T110000Z", "20261201T095000Z-spark-pair-deploy", 75.0)
    other = run("20261201T120000Z", "20261201T115000Z-spark-pair-rollback", 90.0)
    (tmp_path / "bench-20261201T130000Z.json").write_text("{ cut short")
    assert vllm_benchmark.earlier_run(older, str(tmp_path)) == (older, [dict(row, decode_tps=70.0)])
    assert vllm_benchmark.earlier_run("20261201T095000Z-spark-pair-deploy", str(tmp_path))[0] == newer
    assert vllm_benchmark.earlier_run("20261201T115000Z-spark-pair-rollback", str(tmp_path))[0] == other
    with pytest.raises(ValueError) as refused:
        vllm_benchmark.earlier_run("20261130T000000Z-spark-pair-deploy", str(tmp_path))
    assert str(refused.value) == (
        f"compare_with 20261130T000000Z-spark-pair-deploy: neither a bench-*.json nor a deployment with a benchmark "
        f"run in {tmp_path} (deployments measured there: ['20261201T095000Z-spark-pair-deploy', "
        f"'20261201T115000Z-spark-pair-rollback'])"
    )
    with pytest.raises(ValueError, match="not a readable bench-"):
        vllm_benchmark.earlier_run(str(tmp_path / "bench-20261201T130000Z.json"), str(tmp_path))


def test_report_names_the_deployment_measured():
    record = {
        "id": "20261201T075000Z-spark-pair-deploy",
        "profile_name": "pair",
        "status": "passed",
        "image": {"ref": "10.0.0.2:5000/vllm@sha256:ab", "id": "sha256:cd"},
        "ranks": [{"argv": ["serve"]}],
    }
    assert vllm_benchmark.deployment_summary(None) is None
    meta = {
        "created_utc": "20261201T080000Z",
        "url": "http://h:8000",
        "model": "m",
        "max_tokens": 64,
        "compare_with": "",
        "noise_pct": 3.0,
        "deployment": vllm_benchmark.deployment_summary(record),
    }
    assert meta["deployment"] == {
        "id": record["id"],
        "profile_name": "pair",
        "status": "passed",
        "image": "10.0.0.2:5000/vllm@sha256:ab",
    }
    text = vllm_benchmark.report_markdown(meta, "| table |\n", "", [])
    assert (
        "Measured on deployment 20261201T075000Z-spark-pair-deploy (profile pair, passed, image "
        "10.0.0.2:5000/vllm@sha256:ab)."
    ) in text
    assert text.index("Measured on deployment") < text.index("| table |")
