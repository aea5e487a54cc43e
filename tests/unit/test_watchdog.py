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
    state = {"status": 200, "auth": [], "paths": []}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            state["auth"].append(self.headers.get("Authorization"))
            state["paths"].append(self.path)
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
    """The head node's commands: `answers` decides docker inspect, ping and each worker command over SSH (`peer`);
    `on_up` runs when the head's compose project comes up; `calls` lists every argv."""
    answers = {
        "head": "running 2026-12-02T03:00:00Z",
        "unreachable": set(),
        "peer": {"stop": (0, ""), "start": (0, ""), "state": (0, "running")},
        "on_up": lambda: None,
    }
    calls = []

    def run(argv, timeout=30):
        calls.append(argv)
        if argv[0] == "ssh":
            return answers["peer"][argv[-1]]
        if argv[:2] == ["docker", "compose"]:
            answers["head"] = "running 2026-12-02T04:00:00Z" if "up" in argv else None
            if "up" in argv:
                answers["on_up"]()
            return 0, ""
        if argv[:2] == ["docker", "inspect"]:
            return (0, answers["head"]) if answers["head"] else (1, "Error: No such object")
        if argv[0] == "ping":
            return (1, "") if argv[-1] in answers["unreachable"] else (0, "")
        if argv[:2] == ["docker", "stop"]:
            answers["head"] = "exited 2026-12-02T03:00:00Z"
            return 0, argv[-1]
        if argv[:2] == ["docker", "logs"]:
            return 0, "ERROR engine core failed: the head's last words"
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


def restart_config(tmp_path, port, **extra):
    return config(
        tmp_path,
        port,
        auto_restart=True,
        auto_restart_max=1,
        load_timeout_s=30,
        project="spark-serve",
        compose_dir="/etc/spark-serve",
        key_file="/var/lib/spark-serve/watchdog/id_ed25519",
        known_hosts="/var/lib/spark-serve/watchdog/known_hosts",
        **extra,
    )


def actions(calls):
    """The restart's steps in order: worker commands over SSH and the head's compose verbs."""
    verb = {True: "up", False: "down"}
    return [c[-1] if c[0] == "ssh" else verb["up" in c] if c[1] == "compose" else c[1] for c in calls]


def test_auto_restart_restarts_in_the_deploys_order_and_rearms(tmp_path, node, endpoint):
    answers, calls = node
    endpoint["status"] = 500
    answers["on_up"] = lambda: endpoint.update(status=200)
    cfg = restart_config(tmp_path, endpoint["port"])
    assert watchdog.look(cfg) == ["a generation failed with HTTP 500"]
    steps = [a for a in actions(calls) if a in ("stop", "down", "start", "up")]
    assert steps == ["stop", "stop", "down", "start", "up"], "head stopped, workers stopped, head down, workers, head"
    assert next(c for c in calls if c[0] == "ssh")[-2] == "root@10.0.0.2"
    unhealthy, ready = events(tmp_path)
    assert unhealthy["recover"] == "auto-restart" and ready["event"] == "auto-restart ready"
    assert ready["restart"] == 1 and ready["seconds"] >= 0
    calls.clear()
    assert watchdog.look(cfg) == [] and not [c for c in calls if c[:2] == ["docker", "stop"]], "armed again"


def test_a_failed_auto_restart_leaves_every_rank_stopped(tmp_path, node, endpoint):
    answers, calls = node
    endpoint["status"] = 500
    answers["peer"]["state"] = (0, "exited")
    assert watchdog.look(restart_config(tmp_path, endpoint["port"])) == ["a generation failed with HTTP 500"]
    failed = events(tmp_path)[-1]
    assert failed["event"] == "auto-restart failed" and failed["action"] == "every rank stopped"
    assert failed["problem"] == "a rank stopped while the service loaded: node-1"
    with open(failed["head_log"], encoding="utf-8") as kept:
        assert "the head's last words" in kept.read(), "the head's log is kept before its container goes"
    assert actions(calls)[-2:] == ["stop", "down"] and answers["head"] is None, "stopped again after the failure"
    calls.clear()
    assert watchdog.look(restart_config(tmp_path, endpoint["port"])) == [] and calls == [], "acts once"


def test_auto_restart_warms_up_like_the_deploy_before_its_generation(tmp_path, node, endpoint):
    answers, _ = node
    endpoint["status"] = 500
    answers["on_up"] = lambda: endpoint.update(status=200, paths=[])
    warmup = [
        {"name": "short-chat", "prompt": "hello", "max_tokens": 4},
        {"name": "long-prompt", "prompt_tokens": 1024, "max_tokens": 4},
        {"name": "tool-call", "tool": True, "max_tokens": 16},
    ]
    watchdog.look(restart_config(tmp_path, endpoint["port"], warmup=warmup))
    assert events(tmp_path)[-1]["event"] == "auto-restart ready", events(tmp_path)
    assert endpoint["paths"] == ["/v1/chat/completions", "/v1/chat/completions", "/v1/completions"]


def test_a_failed_warm_up_fails_the_restart_naming_it(tmp_path, node, endpoint):
    endpoint["status"] = 500
    warmup = [{"name": "short-chat", "prompt": "hello", "max_tokens": 4}]
    watchdog.look(restart_config(tmp_path, endpoint["port"], warmup=warmup))
    assert events(tmp_path)[-1]["problem"] == "warm-up short-chat: a generation failed with HTTP 500"


def test_auto_restart_stops_after_its_maximum_until_the_next_deploy(tmp_path, node, endpoint):
    answers, _ = node
    endpoint["status"] = 500
    answers["on_up"] = lambda: endpoint.update(status=200)
    cfg = restart_config(tmp_path, endpoint["port"])
    watchdog.look(cfg)
    endpoint["status"] = 500
    assert watchdog.look(cfg) == ["a generation failed with HTTP 500"]
    last = events(tmp_path)[-1]
    assert last["event"] == "service unhealthy" and last["recover"] == "ansible-playbook site.yml --tags deploy"


def test_a_worker_that_cannot_be_restarted_is_named(tmp_path, node, endpoint):
    answers, _ = node
    endpoint["status"] = 500
    answers["peer"]["start"] = (255, "ssh: connect to host 10.0.0.2 port 22: No route to host")
    watchdog.look(restart_config(tmp_path, endpoint["port"]))
    assert events(tmp_path)[-1]["problem"] == (
        "could not restart: node-1: ssh: connect to host 10.0.0.2 port 22: No route to host"
    )
