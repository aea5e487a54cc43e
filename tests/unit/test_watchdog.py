"""roles/vllm_service/files/spark-serve-watchdog.py, the head's watchdog, against simulated docker/ping answers and a
local OpenAI-style endpoint."""

import http.server
import importlib.util
import json
import threading

import pytest

from tests.conftest import ROOT

SCRIPT = ROOT / "roles" / "vllm_service" / "files" / "spark-serve-watchdog.py"
SPEC = importlib.util.spec_from_file_location("spark_serve_watchdog", SCRIPT)
watchdog = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(watchdog)


@pytest.fixture()
def endpoint():
    """A completions endpoint: answers with the status in `state['status']`; records Authorization headers."""
    state = {"status": 200, "auth": []}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            state["auth"].append(self.headers.get("Authorization"))
            body = json.dumps({"choices": [{"text": "!"}]} if state["status"] == 200 else {"error": "dead"}).encode()
            self.send_response(state["status"])
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    state["port"] = server.server_address[1]
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture()
def node(monkeypatch):
    """The head node's commands: `answers` decides docker inspect and ping; `calls` lists every argv."""
    answers = {"head": "running 2026-12-02T03:00:00Z", "unreachable": set()}
    calls = []

    def run(argv, timeout=30):
        calls.append(argv)
        if argv[:2] == ["docker", "inspect"]:
            return (0, answers["head"]) if answers["head"] else (1, "Error: No such object")
        if argv[0] == "ping":
            return (1, "") if argv[-1] in answers["unreachable"] else (0, "")
        if argv[:2] == ["docker", "stop"]:
            answers["head"] = "exited 2026-12-02T03:00:00Z"
            return 0, argv[-1]
        raise AssertionError(argv)

    monkeypatch.setattr(watchdog, "run", run)
    return answers, calls


def config(tmp_path, port, **extra):
    return {
        "armed": True,
        "container": "spark-serve-rank0",
        "port": port,
        "model": "tiny-llama",
        "peers": [{"host": "node-1", "address": "10.0.0.2"}],
        "mtu": 9000,
        "generation_every_s": 0,
        "generation_timeout_s": 5,
        "secrets_file": "",
        "record_dir": str(tmp_path / "records"),
        "state_file": str(tmp_path / "state" / "state.json"),
        **extra,
    }


def events(tmp_path):
    path = tmp_path / "records" / "watchdog-events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_healthy_service_is_left_alone(tmp_path, node, endpoint):
    _, calls = node
    assert watchdog.look(config(tmp_path, endpoint["port"])) == []
    assert ["ping", "-M", "do", "-s", "8972", "-c", "1", "-W", "2", "10.0.0.2"] in calls
    assert not [c for c in calls if c[:2] == ["docker", "stop"]] and events(tmp_path) == []
    assert endpoint["auth"] == [None], "one generation, without a key"


def test_a_failed_generation_stops_the_head_once_and_records_why(tmp_path, node, endpoint):
    _, calls = node
    endpoint["status"] = 500
    cfg = config(tmp_path, endpoint["port"])
    assert watchdog.look(cfg) == ["a generation failed with HTTP 500"]
    assert ["docker", "stop", "--time", "10", "spark-serve-rank0"] in calls
    (event,) = events(tmp_path)
    assert event["problems"] == ["a generation failed with HTTP 500"]
    assert event["action"] == "stopping spark-serve-rank0 so that /health fails"
    assert watchdog.look(cfg) == [] and len(events(tmp_path)) == 1, "it acts once, until the next start"


def test_a_lost_link_names_the_peer_and_skips_the_generation(tmp_path, node, endpoint):
    answers, _ = node
    answers["unreachable"].add("10.0.0.2")
    problems = watchdog.look(config(tmp_path, endpoint["port"]))
    assert problems == ["fast link to node-1 (10.0.0.2) drops DF pings of 8972 bytes"]
    assert endpoint["auth"] == [] and events(tmp_path)[0]["problems"] == problems


def test_a_dead_head_is_recorded(tmp_path, node, endpoint):
    answers, _ = node
    answers["head"] = None
    assert watchdog.look(config(tmp_path, endpoint["port"])) == ["head container spark-serve-rank0 is not running"]
    assert events(tmp_path)[0]["head_started_at"] is None


def test_the_generation_waits_for_its_interval_and_sends_the_key(tmp_path, node, endpoint):
    secrets = tmp_path / "secrets.env"
    secrets.write_text("VLLM_API_KEY=sk-test\n")
    cfg = config(tmp_path, endpoint["port"], generation_every_s=3600, secrets_file=str(secrets))
    assert watchdog.look(cfg) == [] and watchdog.look(cfg) == []
    assert endpoint["auth"] == ["Bearer sk-test"], "one generation per interval"


def test_disarmed_it_looks_at_nothing(tmp_path, node, endpoint):
    _, calls = node
    assert watchdog.look(config(tmp_path, endpoint["port"], armed=False)) == [] and calls == []


def test_main_reads_the_config_file_and_exits_1_on_a_problem(tmp_path, node, endpoint):
    endpoint["status"] = 503
    path = tmp_path / "watchdog.json"
    path.write_text(json.dumps(config(tmp_path, endpoint["port"])))
    assert watchdog.main(["watchdog", str(path)]) == 1
    assert watchdog.main(["watchdog"]) == 2
