"""The OpenAI-endpoint modules (library/vllm_acceptance.py, vllm_diagnose.py, vllm_benchmark.py) run as Ansible
runs them against a fake vLLM server on 127.0.0.1: check mode, the shared url/model/api_key_file options, what a
pass, a rejection and an unreachable server return."""

import json

import pytest
from ansible.modules import vllm_acceptance, vllm_benchmark, vllm_diagnose

from tests.fake_vllm import FakeVllm, unused_port
from tests.module_harness import run_module

KEY = "sk-test-key-42"
SMALL_GATE = {"long_prompt_words": 64, "max_tokens": 4, "tool_max_tokens": 16}


@pytest.fixture()
def server():
    fake = FakeVllm(api_key=KEY, served=3)
    yield fake
    fake.close()


@pytest.fixture()
def key_file(tmp_path):
    path = tmp_path / "api-key"
    path.write_text(KEY + "\n")
    return str(path)


def endpoint(server, key_file, **args):
    return dict(url=server.url + "/", model="tiny", api_key_file=key_file, **args)


@pytest.mark.parametrize("module", [vllm_acceptance, vllm_diagnose, vllm_benchmark])
def test_check_mode_sends_nothing(module, server, key_file, tmp_path):
    args = endpoint(server, key_file, dest=str(tmp_path / "bench")) if module is vllm_benchmark else {}
    result = run_module(module, args or endpoint(server, key_file), check_mode=True)
    assert result["skipped"] is True and result["changed"] is False
    assert server.requests == []
    assert not (tmp_path / "bench").exists()


@pytest.mark.parametrize("module", [vllm_acceptance, vllm_diagnose, vllm_benchmark])
def test_an_unreadable_key_file_fails_naming_it(module, server, tmp_path):
    missing = str(tmp_path / "no-key")
    args = endpoint(server, missing, dest=str(tmp_path)) if module is vllm_benchmark else endpoint(server, missing)
    result = run_module(module, args)
    assert result["failed"] and result["msg"] == f"api_key_file {missing}: No such file or directory"
    assert server.requests == []


@pytest.mark.parametrize("module", [vllm_acceptance, vllm_diagnose, vllm_benchmark])
def test_the_shared_options_are_required(module):
    result = run_module(module, {"dest": "/nonexistent"} if module is vllm_benchmark else {})
    assert result["failed"] and result["msg"] == "missing required arguments: model, url"


def test_gate_passes_sends_the_key_as_bearer_and_never_returns_it(server, key_file):
    gate = dict(SMALL_GATE, hot_ttft_max_s=30.0, hit_ratio_min=0.75)
    result = run_module(vllm_acceptance, endpoint(server, key_file, acceptance=gate))
    assert result["failures"] == [] and result["passed"] is True and result["changed"] is False
    assert [r["name"] for r in result["requests"]][:4] == ["short", "cold", "hot-1", "hot-2"]
    assert result["summary"]["tool_call_ok"] is True and result["summary"]["hot_hit_ratio"] >= 0.75
    paths = [path for path, _, _ in server.requests]
    assert paths[0] == "/metrics" and paths[-1] == "/metrics" and paths.count("/v1/chat/completions") == 9
    assert {auth for _, auth, _ in server.requests} == {f"Bearer {KEY}"}
    assert KEY not in json.dumps(result)


def test_gate_rejection_is_a_result_not_a_task_failure(server, key_file):
    result = run_module(vllm_acceptance, endpoint(server, key_file, acceptance=dict(SMALL_GATE, hit_ratio_min=0.99)))
    assert result["failed"] is False and result["passed"] is False
    assert result["failures"] and all("hit ratio" in failure and "< 0.99" in failure for failure in result["failures"])


def test_gate_fails_the_task_when_the_server_does_not_answer(key_file):
    url = f"http://127.0.0.1:{unused_port()}"
    result = run_module(vllm_acceptance, {"url": url, "model": "tiny", "api_key_file": key_file})
    assert result["failed"]
    assert result["msg"].startswith(f"the acceptance gate cannot reach the server: GET {url}/metrics: ")


def test_a_wrong_key_is_refused_by_the_server_and_named(server, tmp_path):
    wrong = tmp_path / "wrong-key"
    wrong.write_text("sk-wrong")
    result = run_module(vllm_acceptance, endpoint(server, str(wrong)))
    assert result["failed"] and "HTTP 401" in result["msg"] and "sk-wrong" not in json.dumps(result)


def test_diagnose_probes_twice_and_names_prefix_caching_off(server, key_file):
    args = endpoint(server, key_file, argv=["--no-enable-prefix-caching"], probe_words=48, max_tokens=2)
    result = run_module(vllm_diagnose, args)
    assert result["changed"] is False and result["primary"] == "prefix-caching-off"
    probes = result["evidence"]["probes"]
    assert [p["name"] for p in probes] == ["probe-first", "probe-repeat"]
    assert probes[0]["cached_tokens"] == 0 and probes[1]["cached_tokens"] == 48
    assert result["evidence"]["served_before"] == 3 and result["evidence"]["prefix_caching"] is False


def test_diagnose_without_a_finding_says_no_problem_found(server, key_file):
    result = run_module(vllm_diagnose, endpoint(server, key_file, probe_words=48, max_tokens=2, effective_block=16))
    assert [v["verdict"] for v in result["verdicts"]] == ["no-problem-found"]


def test_diagnose_takes_the_block_the_engine_reports_over_the_recorded_prediction(key_file):
    fake = FakeVllm(api_key=KEY, served=3, cache_block=64)
    try:
        result = run_module(vllm_diagnose, endpoint(fake, key_file, probe_words=48, max_tokens=2, effective_block=16))
    finally:
        fake.close()
    assert result["primary"] == "block-larger-than-request", result["verdicts"]
    assert result["evidence"]["effective_block"] == 64
    assert (
        "effective cache block 64 tokens (engine /metrics cache_config_info) > the whole request (48 tokens)"
        in (result["verdicts"][0]["evidence"][0])
    )


def test_diagnose_fails_pointing_at_status_when_the_service_is_down(key_file):
    url = f"http://127.0.0.1:{unused_port()}"
    result = run_module(vllm_diagnose, {"url": url, "model": "tiny", "api_key_file": key_file})
    assert result["failed"] and result["msg"].startswith("cannot diagnose: the service does not answer (GET ")
    assert result["msg"].endswith("run playbooks/status.yml to see which rank is down")


def test_benchmark_writes_its_files_and_returns_rows(server, key_file, tmp_path):
    dest = tmp_path / "bench"
    args = endpoint(server, key_file, dest=str(dest), input_words=[32, 64], max_tokens=3)
    result = run_module(vllm_benchmark, args)
    assert result["changed"] is True and result["problems"] == []
    assert [row["input_words"] for row in result["rows"]] == [32, 64]
    assert all(row["hot_cached_tokens"] > 0 for row in result["rows"])
    assert sorted(p.suffix for p in dest.iterdir()) == [".json", ".md", ".png"]
    assert json.loads((dest / result["paths"]["json"].rsplit("/", 1)[-1]).read_text())["rows"] == result["rows"]
    assert result["compared_with"] == "" and result["comparison"] == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"max_tokens": 1}, "max_tokens 1: must be at least 2 (a decode speed needs two tokens)"),
        ({"repeats": 0}, "repeats 0: must be at least 1"),
        ({"input_words": []}, "input_words []: must be a non-empty list of positive lengths"),
    ],
)
def test_benchmark_refuses_bad_sizes_before_sending(server, key_file, tmp_path, args, message):
    result = run_module(vllm_benchmark, dict(endpoint(server, key_file, dest=str(tmp_path)), **args))
    assert result["failed"] and result["msg"] == message and server.requests == []


def test_benchmark_refuses_an_unknown_comparison_before_sending(server, key_file, tmp_path):
    args = endpoint(server, key_file, dest=str(tmp_path), compare_with="20261130T000000Z-x-deploy")
    result = run_module(vllm_benchmark, args)
    assert result["failed"] and result["msg"].startswith("compare_with 20261130T000000Z-x-deploy: neither")
    assert server.requests == []
