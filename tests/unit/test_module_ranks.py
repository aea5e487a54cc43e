"""library/vllm_ranks.py run as Ansible runs it: container state and log lines from a fake `docker`
(AnsibleModule.run_command patched), the head's /health from a fake server on 127.0.0.1."""

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.modules import vllm_ranks

from tests.fake_vllm import LoopbackServer, unused_port
from tests.module_harness import run_module

READY_LOG = "Loading weights took 1.2 seconds\nStarting vLLM API server 0 on http://0.0.0.0:8000\n"
DEAD_LOG = "Loading weights took 1.2 seconds\nTraceback (most recent call last):\nRuntimeError: gloo lost rank 0\n"


STARTED_AT = "2026-12-01T23:40:00.123456789Z"


def fake_docker(monkeypatch, inspect, logs="", earlier_runs=""):
    """docker inspect answers `inspect` ("running 0"; None: no such container) with STARTED_AT; docker logs answers
    `logs`, preceded by `earlier_runs` unless asked only for the lines since STARTED_AT."""
    calls = []

    def run_command(module, argv, **kwargs):
        calls.append(argv)
        if argv[1] == "inspect":
            return (0, f"{inspect} {STARTED_AT}\n", "") if inspect else (1, "", "Error: No such object")
        if argv[1] == "logs":
            since = argv[argv.index("--since") + 1] if "--since" in argv else None
            return 0, (logs if since == STARTED_AT else earlier_runs + logs), ""
        raise AssertionError(f"unexpected command {argv}")

    monkeypatch.setattr(AnsibleModule, "run_command", run_command)
    return calls


@pytest.fixture()
def health_server():
    """/health answers the status in `answer[0]`; yields (port, answer)."""
    answer = [200]
    server = LoopbackServer(lambda request: (answer[0] if request.path == "/health" else 404, {}, []))
    yield server.port, answer
    server.close()


def test_a_running_worker_is_alive_at_its_stage_without_health(monkeypatch):
    calls = fake_docker(monkeypatch, "running 0", READY_LOG)
    result = run_module(vllm_ranks, {"container": "rank1", "log_lines": 50}, check_mode=True)
    assert result["changed"] is False
    assert (result["alive"], result["state"], result["stage"], result["health"]) == (True, "running", "serving", None)
    assert calls[1] == ["docker", "logs", "--since", STARTED_AT, "--tail", "50", "rank1"]


def test_a_rank_restarted_by_docker_is_judged_by_its_current_run_only(monkeypatch):
    fake_docker(monkeypatch, "running 0", READY_LOG, earlier_runs=DEAD_LOG)
    result = run_module(vllm_ranks, {"container": "rank0"})
    assert (result["alive"], result["stage"], result["reason"]) == (True, "serving", None), result


def test_a_worker_whose_log_shows_a_traceback_is_dead_while_still_running(monkeypatch):
    fake_docker(monkeypatch, "running 0", DEAD_LOG)
    result = run_module(vllm_ranks, {"container": "rank1"})
    assert result["alive"] is False and result["stage"] == "weights loaded"
    assert result["reason"] == "Traceback (most recent call last): -- RuntimeError: gloo lost rank 0"


def test_an_exited_or_missing_container_is_dead_with_its_exit_code(monkeypatch):
    fake_docker(monkeypatch, "exited 137")
    result = run_module(vllm_ranks, {"container": "rank1"})
    assert (result["alive"], result["exit_code"], result["reason"]) == (False, 137, "container exited (exit code 137)")
    calls = fake_docker(monkeypatch, None)
    result = run_module(vllm_ranks, {"container": "rank1"})
    assert (result["state"], result["reason"]) == (None, "container missing (exit code None)")
    assert len(calls) == 1, "no log is read without a container"


def test_the_head_is_alive_only_when_health_answers_200(monkeypatch, health_server):
    port, answer = health_server
    fake_docker(monkeypatch, "running 0", READY_LOG)
    result = run_module(vllm_ranks, {"container": "rank0", "head": True, "port": port})
    assert (result["alive"], result["health"]) == (True, 200)
    answer[0] = 503
    result = run_module(vllm_ranks, {"container": "rank0", "head": True, "port": port})
    assert (result["alive"], result["health"], result["reason"]) == (False, 503, "/health answered 503")


def test_a_head_whose_api_does_not_answer_is_dead(monkeypatch):
    fake_docker(monkeypatch, "running 0", READY_LOG)
    free_port = unused_port()
    result = run_module(vllm_ranks, {"container": "rank0", "head": True, "port": free_port})
    assert (result["alive"], result["health"], result["reason"]) == (False, None, "/health answered None")
