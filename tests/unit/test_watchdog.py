"""roles/vllm_service/files/spark-serve-watchdog.py, the head's watchdog, against simulated docker/ping answers and a
local OpenAI-style endpoint."""

import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import certifi
import pytest

from tests.conftest import ROOT
from tests.fake_vllm import LoopbackServer

SCRIPT = ROOT / "roles" / "vllm_service" / "files" / "spark-serve-watchdog.py"
sys.path.insert(0, str(ROOT / "module_utils"))  # the role installs inventory_lock.py beside the script
SPEC = importlib.util.spec_from_file_location("spark_serve_watchdog", SCRIPT)
watchdog = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(watchdog)


def metrics_text(running, waiting, tokens):
    """vLLM v1 /metrics as the engine writes it (labels, a comment, a histogram), summed by the watchdog."""
    labels = '{engine="0",model_name="tiny-llama"}'
    return (
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        f"vllm:num_requests_running{labels} {running}.0\n"
        f"vllm:num_requests_waiting{labels} {waiting}.0\n"
        f"vllm:generation_tokens_total{labels} {tokens}.0\n"
        f'vllm:iteration_tokens_total_bucket{{engine="0",le="1.0"}} {tokens}.0\n'
    )


@pytest.fixture()
def endpoint():
    """A completions endpoint: answers with the status in `state['status']` after `state['delay']` seconds, and
    /metrics with `state['metrics']` (idle by default); records Authorization headers and POSTed paths, and runs
    `state['on_post']` as a POST arrives (what else happens on the node meanwhile)."""
    state = {"status": 200, "auth": [], "paths": [], "delay": 0, "metrics": metrics_text(0, 0, 0), "on_post": None}

    def answer(request):
        if request.method == "GET":
            found = request.path in ("/health", "/metrics")
            return 200 if found else 404, {}, [state["metrics"].encode() if request.path == "/metrics" else b""]
        state["auth"].append(request.headers.get("Authorization"))
        state["paths"].append(request.path)
        if state["on_post"]:
            state["on_post"]()
        time.sleep(state["delay"])
        body = {"choices": [{"text": "!"}]} if state["status"] == 200 else {"error": "dead"}
        return state["status"], {"Content-Type": "application/json"}, [json.dumps(body).encode()]

    server = LoopbackServer(answer)
    state["port"] = server.port
    yield state
    server.close()


@pytest.fixture()
def node(monkeypatch):
    """The head node's commands: `answers` decides docker inspect, ping and each worker command over SSH (`peer`);
    `on_up` runs when the head's compose project comes up; `calls` lists every argv."""
    answers = {
        "head": "running 2026-12-02T03:00:00Z",
        "unreachable": set(),
        "peer": {"stop": (0, ""), "start": (0, ""), "state": (0, "running"), "wipe-cache": (0, "")},
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
            if answers.get("no_daemon"):
                return 1, "Cannot connect to the Docker daemon at unix:///var/run/docker.sock."
            return (0, answers["head"]) if answers["head"] else (1, "Error: No such object")
        if argv[0] == "ping":
            return (1, "") if argv[-1] in answers["unreachable"] else (0, "")
        if argv[:2] == ["docker", "stop"]:
            answers["head"] = "exited 2026-12-02T03:00:00Z"
            return 0, argv[-1]
        if argv[:2] == ["docker", "logs"]:
            return 0, "ERROR engine core failed: the head's last words"
        if argv[0] == "find":  # the head's own cache is wiped for real (a folder under tmp_path)
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
            return done.returncode, done.stdout + done.stderr
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
        "generation_timeout_s": 5,
        "progress_timeout_s": 10,
        "failed_looks": 1,
        "load_timeout_s": 30,
        "secrets_file": "",
        "record_dir": str(tmp_path / "records"),
        "state_file": str(tmp_path / "state" / "state.json"),
        "lock_file": str(tmp_path / "lock.json"),
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


def test_the_idle_generation_sends_the_key(tmp_path, node, endpoint):
    secrets = tmp_path / "secrets.env"
    secrets.write_text("VLLM_API_KEY=sk-test\n")
    assert watchdog.look(config(tmp_path, endpoint["port"], secrets_file=str(secrets))) == []
    assert endpoint["auth"] == ["Bearer sk-test"]


def test_disarmed_it_looks_at_nothing(tmp_path, node, endpoint):
    _, calls = node
    assert watchdog.look(config(tmp_path, endpoint["port"], armed=False)) == [] and calls == []


def test_main_reads_the_config_file_and_exits_1_on_a_problem(tmp_path, node, endpoint):
    endpoint["status"] = 503
    path = tmp_path / "watchdog.json"
    path.write_text(json.dumps(config(tmp_path, endpoint["port"])))
    assert watchdog.main(["watchdog", str(path)]) == 1
    assert watchdog.main(["watchdog"]) == 2


def exported(path):
    """{(name, event label or ''): value} of a textfile-collector file, checking every sample line's shape."""
    samples = {}
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            assert line.split()[1] in ("HELP", "TYPE"), line
            continue
        name, value = line.rsplit(" ", 1)
        event = name.partition('{event="')[2].rstrip('"}')
        samples[(name.split("{")[0], event)] = float(value)
    return samples


def test_every_look_exports_its_verdicts_and_event_counts_for_the_node_exporter(tmp_path, node, endpoint):
    path = tmp_path / "watchdog.json"
    metrics = tmp_path / "textfile" / "spark_serve_watchdog.prom"
    path.write_text(json.dumps(config(tmp_path, endpoint["port"], metrics_file=str(metrics))))
    assert watchdog.main(["watchdog", str(path)]) == 0
    healthy = exported(metrics)
    assert {event for name, event in healthy if name == "spark_serve_watchdog_events_total"} == set(watchdog.EVENTS)
    assert healthy[("spark_serve_watchdog_events_total", "service unhealthy")] == 0
    assert healthy[("spark_serve_watchdog_armed", "")] == 1 and healthy[("spark_serve_watchdog_tripped", "")] == 0
    assert abs(healthy[("spark_serve_watchdog_last_look_timestamp_seconds", "")] - time.time()) < 60
    endpoint["status"] = 503
    assert watchdog.main(["watchdog", str(path)]) == 1
    tripped = exported(metrics)
    assert tripped[("spark_serve_watchdog_events_total", "service unhealthy")] == 1
    assert tripped[("spark_serve_watchdog_tripped", "")] == 1
    assert not list(metrics.parent.glob("*.tmp")), "written whole, then renamed"


def test_each_rank_containers_state_is_exported_with_the_workers_read_over_the_restart_path(tmp_path, node, endpoint):
    answers, calls = node
    metrics, key = tmp_path / "textfile" / "spark_serve_watchdog.prom", tmp_path / "id_ed25519"
    key.write_text("a key")
    cfg = config(tmp_path, endpoint["port"], metrics_file=str(metrics), key_file=str(key), host="node-0")
    cfg["known_hosts"] = str(tmp_path / "known_hosts")
    answers["peer"]["state"] = (0, "exited")
    path = tmp_path / "watchdog.json"
    path.write_text(json.dumps(cfg))
    watchdog.main(["watchdog", str(path)])
    running = {
        line.split("{")[1].split("}")[0]: line.split()[-1]
        for line in metrics.read_text().splitlines()
        if line.startswith("spark_serve_rank_container_running")
    }
    assert running == {'rank="0",host="node-0"': "1.0", 'rank="1",host="node-1"': "0.0"}
    answers["peer"]["state"] = (255, "ssh: connect to host 10.0.0.2 port 22: No route to host")
    watchdog.main(["watchdog", str(path)])
    assert 'host="node-1"' not in metrics.read_text(), "a worker that does not answer is unknown, not gone"
    assert [c[-1] for c in calls if c[0] == "ssh"] == ["state", "state"]


def test_a_trip_is_exported_before_its_automatic_restart_ends(tmp_path, node, endpoint):
    answers, _ = node
    metrics = tmp_path / "textfile" / "spark_serve_watchdog.prom"
    during = {}
    endpoint["status"] = 500
    answers["on_up"] = lambda: during.update(exported(metrics)) or endpoint.update(status=200)
    watchdog.look(restart_config(tmp_path, endpoint["port"], metrics_file=str(metrics)))
    assert during[("spark_serve_watchdog_events_total", "service unhealthy")] == 1, "seen while the head starts"
    assert during[("spark_serve_watchdog_events_total", "auto-restart ready")] == 0
    assert exported(metrics)[("spark_serve_watchdog_events_total", "auto-restart ready")] == 1


def test_each_recorded_event_reaches_the_notification_command_without_the_key(tmp_path, node, endpoint):
    secrets, received = tmp_path / "secrets.env", tmp_path / "received.jsonl"
    secrets.write_text("VLLM_API_KEY=sk-sentinel-notify\n")
    receiver = [sys.executable, "-c", f"import sys; open({str(received)!r}, 'a').write(sys.stdin.read())"]
    endpoint["status"] = 500
    cfg = restart_config(tmp_path, endpoint["port"], secrets_file=str(secrets), notify_command=receiver)
    node[0]["on_up"] = lambda: endpoint.update(status=200)
    watchdog.look(cfg)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and len(received.read_text().splitlines() if received.exists() else []) < 2:
        time.sleep(0.1)
    lines = received.read_text().splitlines()
    assert sorted(json.loads(line)["event"] for line in lines) == ["auto-restart ready", "service unhealthy"]
    assert "sk-sentinel-notify" not in received.read_text()


def test_a_notification_command_that_fails_never_keeps_the_watchdog_from_acting(tmp_path, node, endpoint, capsys):
    _, calls = node
    endpoint["status"] = 500
    assert watchdog.look(config(tmp_path, endpoint["port"], notify_command=["/nonexistent/pager"])) != []
    assert ["docker", "stop", "--time", "10", "spark-serve-rank0"] in calls


def stops(calls):
    return [c for c in calls if c[:2] == ["docker", "stop"]]


def test_it_acts_only_after_consecutive_failed_looks(tmp_path, node, endpoint):
    answers, calls = node
    cfg = config(tmp_path, endpoint["port"], failed_looks=2)
    answers["unreachable"].add("10.0.0.2")
    assert watchdog.look(cfg) == [] and not stops(calls), "one dropped ping is no fault"
    assert events(tmp_path)[-1]["event"] == "look failed" and events(tmp_path)[-1]["look"] == 1
    answers["unreachable"].clear()
    assert watchdog.look(cfg) == [], "a good look starts the count again"
    endpoint["status"] = 500
    assert watchdog.look(cfg) == [] and not stops(calls)
    assert watchdog.look(cfg) == ["a generation failed with HTTP 500"] and len(stops(calls)) == 1


def test_a_busy_service_is_judged_by_its_token_counters_and_never_probed(tmp_path, node, endpoint):
    _, calls = node
    cfg = config(tmp_path, endpoint["port"], generation_timeout_s=1, progress_timeout_s=3600)
    endpoint["delay"] = 2  # a probe would queue behind the users' requests and time out
    for tokens in range(1, 6):
        endpoint["metrics"] = metrics_text(running=4, waiting=4, tokens=tokens * 100)
        assert watchdog.look(cfg) == []
    assert endpoint["paths"] == [] and not stops(calls) and events(tmp_path) == []


def test_work_pending_without_token_progress_is_stuck(tmp_path, node, endpoint):
    _, calls = node
    endpoint["metrics"] = metrics_text(running=2, waiting=1, tokens=500)
    cfg = config(tmp_path, endpoint["port"], progress_timeout_s=0, failed_looks=2)
    assert watchdog.look(cfg) == []  # the first look with work pending starts the clock
    assert watchdog.look(cfg) == []
    problems = watchdog.look(cfg)
    assert len(problems) == 1 and problems[0].startswith("3 request(s) running or waiting and no token progress")
    assert endpoint["paths"] == [] and len(stops(calls)) == 1


def test_an_idle_probe_that_queues_behind_a_new_request_is_no_failure(tmp_path, node, endpoint):
    _, calls = node
    endpoint["delay"] = 2

    def arrive():
        time.sleep(0.3)
        endpoint["metrics"] = metrics_text(running=1, waiting=0, tokens=7)

    threading.Thread(target=arrive, daemon=True).start()
    assert watchdog.look(config(tmp_path, endpoint["port"], generation_timeout_s=1)) == []
    assert not stops(calls) and events(tmp_path) == []


def test_a_wedged_idle_engine_fails_its_probe(tmp_path, node, endpoint):
    endpoint["delay"] = 2
    problems = watchdog.look(config(tmp_path, endpoint["port"], generation_timeout_s=1))
    assert problems == ["a generation failed: timed out"]


def test_nothing_is_judged_while_the_docker_daemon_does_not_answer(tmp_path, node, endpoint):
    answers, calls = node
    answers["no_daemon"] = True
    cfg = config(tmp_path, endpoint["port"], failed_looks=1)
    assert watchdog.look(cfg) == [] and watchdog.look(cfg) == [] and not stops(calls) and events(tmp_path) == []


def test_a_head_container_that_docker_restarts_is_not_judged(tmp_path, node, endpoint):
    answers, calls = node
    answers["head"] = "restarting 2026-12-02T03:00:00Z"
    cfg = config(tmp_path, endpoint["port"])
    assert watchdog.look(cfg) == [] and watchdog.look(cfg) == [] and not stops(calls) and endpoint["paths"] == []


def test_a_head_that_reloads_after_a_reboot_gets_its_load_time(tmp_path, node, endpoint, monkeypatch):
    answers, _ = node
    answers["head"] = "running " + time.strftime("%Y-%m-%dT%H:%M:%S.123456789Z", time.gmtime(time.time() - 20))
    monkeypatch.setattr(watchdog, "health", lambda config: None)
    endpoint["status"] = 500
    cfg = config(tmp_path, endpoint["port"], load_timeout_s=600)
    assert watchdog.look(cfg) == [] and endpoint["paths"] == [], "still loading: nothing judged"
    assert watchdog.look(dict(cfg, load_timeout_s=10)) == ["a generation failed with HTTP 500"], "grace over"


def test_a_head_seen_serving_gets_no_more_grace(tmp_path, node, endpoint, monkeypatch):
    answers, _ = node
    answers["head"] = "running " + time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 20))
    cfg = config(tmp_path, endpoint["port"], load_timeout_s=600)
    assert watchdog.look(cfg) == []
    monkeypatch.setattr(watchdog, "health", lambda config: None)  # the API server froze
    endpoint["status"] = 500
    assert watchdog.look(cfg) == ["a generation failed with HTTP 500"]


# Starts of the head container (`.State.StartedAt`): Docker's restart policy keeps the container and starts it anew.
FIRST, SECOND = "2026-12-02T03:00:00.111111111Z", "2026-12-02T03:04:00.222222222Z"


@pytest.mark.parametrize(
    ("looks", "acts_at"),
    [
        # (head container at the look, the generation's HTTP status), and the look that stops the head (or None)
        ([(f"running {FIRST}", 500), (f"running {SECOND}", 500), (f"running {SECOND}", 500)], 3),
        ([(f"running {FIRST}", 500), (f"restarting {FIRST}", 500), (f"running {SECOND}", 500)], None),
        ([(f"running {FIRST}", 500), (f"running {FIRST}", 500)], 2),  # the same start: acted on as always
        ([(f"running {FIRST}", 500), (f"exited {FIRST}", 500)], 2),  # it died after its failed look
        ([(f"running {FIRST}", 500), (f"running {SECOND}", 200), (f"running {SECOND}", 500)], None),
    ],
    ids=["new-start-counts-anew", "restarting-then-new-start", "same-start", "same-start-died", "good-look-between"],
)
def test_failed_looks_count_toward_one_start_of_the_head_only(tmp_path, node, endpoint, looks, acts_at):
    answers, calls = node
    cfg = config(tmp_path, endpoint["port"], failed_looks=2)
    for number, (head, status) in enumerate(looks, 1):
        answers["head"], endpoint["status"] = head, status
        watchdog.look(cfg)
        assert len(stops(calls)) == (acts_at is not None and number >= acts_at), (number, events(tmp_path))
    if acts_at:
        assert events(tmp_path)[-1]["head_started_at"] == looks[acts_at - 1][0].split()[1], "the start it judged"


def restarted_head(answers):
    answers["head"] = f"running {SECOND}"


def gone_daemon(answers):
    answers["no_daemon"] = True


def restarting_head(answers):
    answers["head"] = f"restarting {FIRST}"


def exited_head(answers):
    answers["head"] = f"exited {FIRST}"


@pytest.mark.parametrize("meanwhile", [restarted_head, gone_daemon, restarting_head, exited_head])
def test_a_5xx_while_docker_stops_or_restarts_the_head_is_no_failed_look(tmp_path, node, endpoint, meanwhile):
    answers, calls = node
    answers["head"] = f"running {FIRST}"
    endpoint.update(status=500, on_post=lambda: meanwhile(answers))
    assert watchdog.look(config(tmp_path, endpoint["port"], failed_looks=1)) == []
    assert endpoint["paths"] == ["/v1/completions"], "the generation was sent and failed"
    assert not stops(calls) and events(tmp_path) == []
    assert watchdog.load_state(str(tmp_path / "state" / "state.json")).get("failed_looks") == 0


def test_a_wedged_engine_in_the_same_running_start_still_trips(tmp_path, node, endpoint):
    answers, calls = node
    answers["head"] = f"running {FIRST}"
    endpoint.update(status=500, on_post=lambda: None)
    assert watchdog.look(config(tmp_path, endpoint["port"], failed_looks=1)) == ["a generation failed with HTTP 500"]
    assert len(stops(calls)) == 1 and events(tmp_path)[-1]["head_started_at"] == FIRST


@pytest.mark.parametrize("meanwhile", [restarted_head, gone_daemon, restarting_head])
def test_it_stands_down_when_docker_restarted_the_head_before_it_acts(tmp_path, node, endpoint, monkeypatch, meanwhile):
    answers, calls = node
    answers["head"] = f"running {FIRST}"
    endpoint["status"] = 500
    take_lock = watchdog.take_lock

    def restarted_meanwhile(config):  # after the look, before the trip
        meanwhile(answers)
        return take_lock(config)

    monkeypatch.setattr(watchdog, "take_lock", restarted_meanwhile)
    cfg = config(tmp_path, endpoint["port"], failed_looks=1)
    assert watchdog.look(cfg) == [] and not stops(calls)
    assert [e["event"] for e in events(tmp_path)] == [], "no trip recorded"
    assert watchdog.load_state(cfg["state_file"]).get("failed_looks") == 0
    assert not (tmp_path / "lock.json").exists(), "the lock released"


def test_a_head_docker_restarted_gets_its_load_time_though_its_last_start_served(tmp_path, node, endpoint, monkeypatch):
    answers, calls = node
    answers["head"] = f"running {FIRST}"
    cfg = config(tmp_path, endpoint["port"], load_timeout_s=600)
    assert watchdog.look(cfg) == [] and endpoint["paths"] == ["/v1/completions"], "the first start seen serving"
    answers["head"] = "running " + time.strftime("%Y-%m-%dT%H:%M:%S.1Z", time.gmtime(time.time() - 20))
    monkeypatch.setattr(watchdog, "health", lambda config: None)  # the new start still loads
    endpoint["status"] = 500
    assert watchdog.look(cfg) == [] and endpoint["paths"] == ["/v1/completions"], "not judged while it loads"
    monkeypatch.setattr(watchdog, "health", lambda config: 200)
    assert watchdog.look(cfg) == ["a generation failed with HTTP 500"], "judged once /health answers"
    assert len(stops(calls)) == 1


def test_it_acts_and_says_so_when_the_record_folder_cannot_be_written(tmp_path, node, endpoint, capsys):
    _, calls = node
    (tmp_path / "records").write_text("a file where the folder should be")
    endpoint["status"] = 500
    cfg = config(tmp_path, endpoint["port"], lock_file=str(tmp_path / "records" / "lock.json"))
    assert watchdog.look(cfg) == ["a generation failed with HTTP 500"]
    assert len(stops(calls)) == 1
    out = capsys.readouterr().out
    assert '"event": "service unhealthy"' in out and "could not record the event above" in out
    assert "could not write the lock" in out and "acting without it" in out


def test_a_look_stands_down_when_a_deploy_disarmed_it_meanwhile(tmp_path, node, endpoint):
    _, calls = node
    endpoint["status"] = 500
    path = tmp_path / "watchdog.json"
    cfg = config(tmp_path, endpoint["port"], path=str(path))
    path.write_text(json.dumps(dict(cfg, armed=False)))
    assert watchdog.look(cfg) == [] and not stops(calls)


def test_a_trip_against_an_earlier_head_is_forgotten_once_the_head_runs_again(tmp_path, node, endpoint):
    answers, calls = node
    endpoint["status"] = 500
    cfg = config(tmp_path, endpoint["port"])
    assert watchdog.look(cfg) == ["a generation failed with HTTP 500"]
    assert watchdog.look(cfg) == [], "stopped, and acted on"
    answers["head"] = "running 2026-12-02T05:00:00Z"  # a deploy started the head again
    assert watchdog.look(cfg) == ["a generation failed with HTTP 500"] and len(stops(calls)) == 2


def test_a_look_judges_nothing_while_a_deploy_holds_the_lock(tmp_path, node, endpoint):
    _, calls = node
    endpoint["status"] = 500
    holder = {"kind": "deploy", "host": "ctl", "pid": 1, "command": "ansible-playbook site.yml", "since": time.time()}
    (tmp_path / "lock.json").write_text(json.dumps(holder))
    assert watchdog.look(config(tmp_path, endpoint["port"])) == [] and calls == [] and endpoint["paths"] == []
    holder["since"] = time.time() - 3 * 3600  # a controller that died mid-deploy must not disarm it for good
    (tmp_path / "lock.json").write_text(json.dumps(holder))
    assert watchdog.look(config(tmp_path, endpoint["port"])) == ["a generation failed with HTTP 500"]


def test_it_acts_holding_the_lock_and_releases_it(tmp_path, node, endpoint, monkeypatch):
    endpoint["status"] = 500
    seen = []
    monkeypatch.setattr(watchdog, "trip", lambda *args: seen.append(json.loads((tmp_path / "lock.json").read_text())))
    dead = {"kind": "watchdog", "host": "head", "pid": 999999999, "since": 1, "token": "old"}
    (tmp_path / "lock.json").write_text(json.dumps(dead))
    assert watchdog.look(config(tmp_path, endpoint["port"])) == ["a generation failed with HTTP 500"]
    assert seen[0]["kind"] == "watchdog" and seen[0]["token"] != "old", "a dead look's lock is taken over"
    assert not (tmp_path / "lock.json").exists(), "released after acting"


def test_it_stands_down_when_another_live_look_holds_the_lock(tmp_path, node, endpoint):
    _, calls = node
    endpoint["status"] = 500
    alive = {"kind": "watchdog", "host": "head", "pid": os.getpid(), "since": time.time(), "token": "other"}
    (tmp_path / "lock.json").write_text(json.dumps(alive))
    assert watchdog.look(config(tmp_path, endpoint["port"])) == [] and not stops(calls)
    assert json.loads((tmp_path / "lock.json").read_text())["token"] == "other", "never another's lock"


def restart_config(tmp_path, port, **extra):
    return config(
        tmp_path,
        port,
        auto_restart=True,
        auto_restart_max=1,
        project="spark-serve",
        compose_dir="/etc/spark-serve",
        key_file="/var/lib/spark-serve/watchdog/id_ed25519",
        known_hosts="/var/lib/spark-serve/watchdog/known_hosts",
        **extra,
    )


def actions(calls):
    """The restart's steps in order: worker commands over SSH, the head's compose verbs and its cache's wipe."""
    verb = {True: "up", False: "down"}
    return [c[-1] if c[0] == "ssh" else c[0] if c[0] == "find" else verb["up" in c] if c[1] == "compose" else c[1]
            for c in calls]  # fmt: skip


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
    assert watchdog.look(restart_config(tmp_path, endpoint["port"])) == []
    assert [c[:2] for c in calls] == [["docker", "inspect"]], "it only looks: it acts once"


def compile_cache(tmp_path):
    """The head's vLLM compile cache for one image, holding what the engine compiled."""
    folder = tmp_path / "vllm-cache" / "0123456789abcdef"
    (folder / "torch_compile_cache").mkdir(parents=True)
    (folder / "torch_compile_cache" / "graph.py").write_text("compiled = True\n")
    return folder


def test_a_trip_wipes_every_ranks_compile_cache_before_the_restart(tmp_path, node, endpoint):
    """What a tripped engine wrote to the compile cache is never loaded again: every rank stopped, then every
    rank's cache emptied (the workers' by their rank control), then the start; the mark is cleared."""
    answers, calls = node
    endpoint["status"] = 500
    answers["on_up"] = lambda: endpoint.update(status=200)
    cache = compile_cache(tmp_path)
    cfg = restart_config(tmp_path, endpoint["port"], engine_cache_dir=str(cache))
    assert watchdog.look(cfg) == ["a generation failed with HTTP 500"]
    steps = [a for a in actions(calls) if a in ("stop", "down", "wipe-cache", "find", "start", "up")]
    assert steps == ["stop", "stop", "down", "wipe-cache", "find", "start", "up"], steps
    assert cache.is_dir() and list(cache.iterdir()) == [], "the folder stays, emptied"
    assert not Path(f"{cache}.untrusted").exists()
    assert events(tmp_path)[-1]["event"] == "auto-restart ready"


def test_without_auto_restart_a_trip_marks_the_cache_for_the_next_deploy(tmp_path, node, endpoint):
    """The workers cannot be reached without the restart path: the head's mark tells the next deploy's start to
    empty every rank's cache (library/vllm_staged_start.py, wipe_cache_dir); nothing is wiped under a rank."""
    _, calls = node
    endpoint["status"] = 500
    cache = compile_cache(tmp_path)
    assert watchdog.look(config(tmp_path, endpoint["port"], engine_cache_dir=str(cache))) != []
    assert Path(f"{cache}.untrusted").read_text().startswith("20")
    assert (cache / "torch_compile_cache" / "graph.py").exists()
    assert not [c for c in calls if c[0] == "find"]


def test_a_cache_a_worker_cannot_empty_fails_the_restart_and_keeps_the_mark(tmp_path, node, endpoint):
    answers, calls = node
    endpoint["status"] = 500
    answers["peer"]["wipe-cache"] = (4, "the rank still runs")
    cache = compile_cache(tmp_path)
    assert watchdog.look(restart_config(tmp_path, endpoint["port"], engine_cache_dir=str(cache))) != []
    failed = events(tmp_path)[-1]
    assert failed["event"] == "auto-restart failed"
    assert failed["problem"] == "could not wipe vLLM's compile cache: node-1: the rank still runs"
    assert "start" not in actions(calls) and "up" not in actions(calls), "no rank started on an untrusted cache"
    assert Path(f"{cache}.untrusted").exists()


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


def test_a_restart_waits_for_a_worker_that_boots_and_runs_once_it_answers(tmp_path, node, endpoint):
    """A power cut: the head finds its engine down while node-1 still boots. No rank is started until node-1 answers
    (SSH, then its Docker daemon, then its fast link), the wait is recorded once, and the restart then runs in the
    deploy's order without a playbook run."""
    answers, calls = node
    answers["head"] = "exited 2026-12-02T03:00:00Z"
    answers["on_up"] = lambda: endpoint.update(status=200)
    answers["peer"]["state"] = (255, "ssh: connect to host 10.0.0.2 port 22: No route to host")
    cfg = restart_config(tmp_path, endpoint["port"])
    assert watchdog.look(cfg) == ["head container spark-serve-rank0 is not running"]
    unhealthy, waits = events(tmp_path)
    assert unhealthy["recover"] == "auto-restart" and waits["event"] == "auto-restart waits"
    assert waits["waiting_for"] == ["node-1 (10.0.0.2): ssh: connect to host 10.0.0.2 port 22: No route to host"]
    answers["peer"]["state"] = (3, "no Docker daemon answers")  # sshd up, dockerd not yet
    answers["unreachable"].add("10.0.0.2")
    for _ in range(2):
        assert watchdog.look(cfg) == []
    answers["peer"]["state"] = (0, "exited")  # the daemon answers; the fast link still drops DF pings
    assert watchdog.look(cfg) == []
    assert not [a for a in actions(calls) if a in ("start", "up")] and len(events(tmp_path)) == 2, "recorded once"
    answers["peer"]["state"] = (0, "running")
    answers["unreachable"].clear()
    calls.clear()
    assert watchdog.look(cfg) == []
    assert [a for a in actions(calls) if a in ("stop", "down", "start", "up")] == ["stop", "down", "start", "up"]
    ready = events(tmp_path)[-1]
    assert ready["event"] == "auto-restart ready" and ready["waited_for_workers_s"] >= 0, ready
    calls.clear()
    assert watchdog.look(cfg) == [] and not [c for c in calls if c[0] == "ssh" and c[-1] == "start"], "served again"


def test_a_due_restart_stands_down_while_a_deploy_holds_the_lock(tmp_path, node, endpoint):
    answers, calls = node
    endpoint["status"] = 500
    answers["peer"]["state"] = (255, "Connection timed out")
    cfg = restart_config(tmp_path, endpoint["port"])
    watchdog.look(cfg)
    answers["peer"]["state"] = (0, "exited")
    holder = {"kind": "deploy", "host": "ctl", "pid": os.getpid(), "command": "site.yml", "since": time.time()}
    (tmp_path / "lock.json").write_text(json.dumps(holder))
    calls.clear()
    assert watchdog.look(cfg) == [] and calls == [], "the deploy owns the service now"
    assert events(tmp_path)[-1]["event"] == "auto-restart waits"


def test_a_single_node_restarts_its_head_after_a_reboot_at_once(tmp_path, node, endpoint):
    answers, calls = node
    answers["head"] = "exited 2026-12-02T03:00:00Z"
    answers["on_up"] = lambda: endpoint.update(status=200)
    watchdog.look(restart_config(tmp_path, endpoint["port"], peers=[]))
    assert [e["event"] for e in events(tmp_path)] == ["service unhealthy", "auto-restart ready"]
    assert not [c for c in calls if c[0] in ("ssh", "ping")], "no worker to wait for"


def test_the_restart_path_is_tried_on_every_worker_with_strict_host_keys(tmp_path, node, capsys):
    answers, calls = node
    path = tmp_path / "watchdog.json"
    settings = config(tmp_path, 1, key_file="/k", known_hosts="/kh")
    settings["peers"].append({"host": "node-2", "address": "10.0.0.3"})
    path.write_text(json.dumps(settings))
    assert watchdog.main(["watchdog", str(path), "--peers"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "node-1 (10.0.0.2): rank running",
        "node-2 (10.0.0.3): rank running",
    ]
    assert all("StrictHostKeyChecking=yes" in argv and argv[-1] == "state" for argv in calls)

    answers["peer"]["state"] = (255, "Host key verification failed.")
    assert watchdog.main(["watchdog", str(path), "--peers"]) == 1
    assert "node-1 (10.0.0.2): unreachable: Host key verification failed." in capsys.readouterr().out
    assert watchdog.main(["watchdog", str(path), "--bogus"]) == 2


def test_in_a_fleet_the_watchdog_takes_its_replica_out_of_the_router_and_back(tmp_path):
    """remove_worker / add_worker with the replica's URL and the head's own router credential; an add the router
    already has counts as done; a router that does not answer is said, never raised; without a router nothing is
    sent."""
    calls, routed = [], set()
    (tmp_path / "router-credential").write_text("cafe0123" * 8 + "\n")

    def answer(request):
        action, url = request.path.split("?url=")
        calls.append((request.method, action, request.headers.get("Authorization")))
        url = watchdog.urllib.parse.unquote(url)
        if action == "/add_worker" and url in routed:
            return 400, {}, [f"Worker {url} already exists".encode()]
        (routed.add if action == "/add_worker" else routed.discard)(url)
        return 200, {}, [b"ok"]

    router = LoopbackServer(answer)  # plain HTTP here: the CA file is loaded, never used
    credential = str(tmp_path / "router-credential")
    config = {
        "router": {
            "url": router.url,
            "member": "https://10.0.0.1:8443",
            "ca_file": certifi.where(),
            "credential_file": credential,
        }
    }
    assert watchdog.tell_router(config, "add_worker") == "done" and routed == {"https://10.0.0.1:8443"}
    assert watchdog.tell_router(config, "add_worker") == "done"  # already there
    assert watchdog.tell_router(config, "remove_worker") == "done" and routed == set()
    sent = f"Bearer {'cafe0123' * 8}"
    assert calls == [("POST", "/add_worker", sent), ("POST", "/add_worker", sent), ("POST", "/remove_worker", sent)]
    router.close()
    assert watchdog.tell_router(config, "remove_worker").startswith("failed: ")
    assert watchdog.tell_router({"router": {}}, "remove_worker") is None
