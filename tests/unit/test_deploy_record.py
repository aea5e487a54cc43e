"""Deployment records: redaction, ids, the last passing record, the Markdown view."""

from ansible.module_utils.deploy_record import last_passed, markdown, record_id
from ansible.module_utils.redaction import REDACTED, redact


def test_redact_hides_secret_names_and_known_secret_values_but_keeps_engine_arguments():
    value = {
        "env": {"VLLM_API_KEY": "sk-1", "HF_TOKEN": "hf_2", "NCCL_IB_HCA": "rocep1s0f1:1"},
        "engine": {"max_num_batched_tokens": 4096, "max_tokens": 8},
        "argv": ["vllm", "serve", "--api-key", "sk-9"],
        "note": "key sk-9 leaked here",
    }
    clean = redact(value, ["sk-9"])
    assert clean["env"] == {"VLLM_API_KEY": REDACTED, "HF_TOKEN": REDACTED, "NCCL_IB_HCA": "rocep1s0f1:1"}
    assert clean["engine"] == {"max_num_batched_tokens": 4096, "max_tokens": 8}
    assert clean["argv"] == ["vllm", "serve", "--api-key", REDACTED]
    assert "sk-9" not in str(clean) and "sk-1" not in str(clean)
    assert value["env"]["VLLM_API_KEY"] == "sk-1", "the input must not be modified"


def test_record_ids_sort_by_time_and_are_file_name_safe():
    first = record_id("20261201T071500Z", "testbed pair/x", "deploy")
    second = record_id("20261201T071501Z", "testbed pair/x", "rollback")
    assert first == "20261201T071500Z-testbed_pair_x-deploy"
    assert sorted([second, first]) == [first, second]


def test_last_passed_skips_failed_records_and_other_inventories():
    records = [
        {"id": "1-a-deploy", "status": "passed", "inventory": "a"},
        {"id": "2-b-deploy", "status": "passed", "inventory": "b"},
        {"id": "3-a-deploy", "status": "passed", "inventory": "a"},
        {"id": "4-a-deploy", "status": "failed", "inventory": "a"},
    ]
    assert last_passed(records, "a")["id"] == "3-a-deploy"
    assert last_passed(records, "b")["id"] == "2-b-deploy"
    assert last_passed(records)["id"] == "3-a-deploy"
    assert last_passed(records, "c") is None


def test_markdown_shows_status_image_overlays_ranks_and_gate_failures():
    record = {
        "id": "20261201T071500Z-pair-deploy",
        "status": "failed",
        "reason": "gate failed",
        "kind": "deploy",
        "inventory": "pair",
        "profile_name": "testbed",
        "engine_version": "0.32.0",
        "image": {"ref": "r/vllm@sha256:ab", "id": "sha256:cd"},
        "model": {"id": "m", "revision": "7e57bed0", "files_sha256": "ef"},
        "effective_block": 128,
        "overlays": [{"src": "o.py", "dest": "/x/o.py", "sha256": "01"}],
        "ranks": [{"rank": 0, "host": "node-0", "argv": ["vllm", "serve", "m"], "env": {"A": "1"}}],
        "timings": [{"seconds": 2.0, "event": "rank 0 started"}],
        "acceptance": {
            "passed": False,
            "failures": ["hot-1: hit ratio 0.00 < 0.50 (short by 0.50)"],
            "summary": {"hot_hit_ratio": 0.0},
            "readback": {"attention_block": 2960, "kv_cache_tokens": 8192, "moe_default_warning": "Using default"},
        },
        "versions": {"ansible-core": "2.19.14"},
    }
    text = markdown(record)
    assert "predicted effective block: 128 tokens\n- engine read-back: attention block 2960 tokens" in text
    assert "KV cache 8192 tokens" in text and "(default-MoE warning)" in text
    for expected in (
        "status: **failed** (gate failed)",
        "r/vllm@sha256:ab (id sha256:cd)",
        "o.py -> /x/o.py",
        "`vllm serve m`",
        "2.0: rank 0 started",
        "FAILED: hot-1: hit ratio 0.00 < 0.50",
        "hot_hit_ratio: 0.0",
        "ansible-core 2.19.14",
        "file list sha256 ef",
    ):
        assert expected in text, expected


def test_markdown_says_when_the_gate_ran_on_a_service_an_earlier_run_started():
    record = {
        "id": "x",
        "status": "passed",
        "kind": "deploy",
        "restarted": False,
        "inventory": "pair",
        "profile_name": "testbed",
        "engine_version": "0.32.0",
        "image": {"ref": "r"},
        "model": {"id": "m", "revision": "7e57bed0"},
    }
    assert "kind: deploy, gated without a restart (an earlier run started it" in markdown(record)
    assert "gated without a restart" not in markdown(dict(record, restarted=True))
