"""site.yml on the two-node test bed with the real vLLM CPU engine (TP2): serving, idempotence, liveness, faults.

Every fault test asserts the time to detection and the end state. Times are printed; the assertions hold them
only to loose bounds (a dead rank well within the engine's own timeout, a stall within the issue's 30 s). The
scenarios live in tests/testbed/service_faults.py, which tests/bench/start_faults_bench.py also runs. The tests
that need the pair serving come first; the stale-containers test starts the shipped profile from scratch (whatever
an earlier module left serving), and the watchdog's automatic restart leaves it serving (the power cut of both
nodes comes right before the no-op rerun, which then proves the rebooted pair runs what the profile renders); the
worker frozen alone comes before the restart that turns on an API key, since its automatic rollback leaves the pair
serving; that restart comes last among them, since every failed start after it renders its own spec anyway; the
other failed starts turn the profile's rollback off and follow one another (a failed start then leaves nothing
running, so they need no redeploy between them).
"""

import hashlib
import json
import re
import socket
import subprocess
import sys
import time
import urllib.error

import pytest
import yaml

from tests.testbed import service_faults as sf
from tests.testbed.helpers import ROOT, node_exec, playbook, run

pytestmark = pytest.mark.testbed


@pytest.fixture(scope="module")
def deployed(served_pair):
    """The shipped profile serving on the prepared pair (served_pair ran site.yml; a deploy only when a fault left
    it stopped). The tests that replace containers start the ranks themselves."""
    sf.ensure_serving()


@pytest.fixture
def serving(deployed):
    sf.ensure_serving()


@pytest.fixture(scope="module")
def monitored(deployed):
    """playbooks/monitoring.yml once on the served pair (Prometheus and Alertmanager on node-1, posting to the
    test's webhook sink there): the busy pair below then proves it raises nothing, the frozen engine core that it
    notifies."""
    rc, out, seconds = sf.start_monitoring()
    print(f"\n[monitoring] playbooks/monitoring.yml took {seconds} s")
    assert rc == 0, out[-4000:]


def test_pair_serves_streaming_chat_and_prefix_cache_hits(serving):
    with sf.post("/v1/chat/completions", sf.chat("stream please", stream=True)) as response:
        events = [line for line in response.read().decode().splitlines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    deltas = [json.loads(e[6:])["choices"][0]["delta"] for e in events[:-1] if json.loads(e[6:])["choices"]]
    assert any(d.get("content") for d in deltas), events[:5]

    prompt = " ".join(f"token{i % 50}" for i in range(600))  # several 128-token CPU blocks
    usage = []
    for _ in range(2):
        with sf.post("/v1/chat/completions", sf.chat(prompt, max_tokens=4)) as response:
            usage.append(json.load(response)["usage"])
    cached = (usage[1].get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    print(f"\n[prefix cache] prompt {usage[1]['prompt_tokens']} tokens, repeat cached {cached}")
    assert cached > 0


@pytest.mark.extended
def test_stale_containers_and_port_squatters_are_replaced_and_the_start_warms_up(serving):
    """Alone proves: a start replaces whatever holds the ranks' names and the API port (a stale rank container,
    another launcher's server), naming what it removed, and sends its warm-up requests before it reports ready."""
    _, ref = node_exec(0, "docker inspect -f '{{.Config.Image}}' spark-serve-rank0")  # the image both nodes hold
    ref = ref.strip()
    node_exec(
        1,
        "docker rm -f spark-serve-rank1 >/dev/null 2>&1; "
        f"docker run -d --name spark-serve-rank1 --entrypoint sleep {ref} 600",
    )
    # Another launcher's container on the head, holding the API port.
    node_exec(
        0,
        "docker rm -f spark-serve-rank0 >/dev/null 2>&1; docker run -d --name old-launcher --network host "
        f"--entrypoint /opt/vllm/bin/python {ref} -m http.server 8000",
    )
    rc, out = sf.deploy()
    assert rc == 0, out[-6000:]
    assert "ready: /health 200" in out
    assert "old-launcher" in out, "the removed port holder must be named"
    for name in ("short-chat", "long-prompt", "tool-call"):  # every start warms up before it reports ready
        assert f"(item={name})" in out, f"warm-up request {name} was not sent"
    rc, cmd = node_exec(1, "docker inspect -f '{{json .Config.Cmd}}' spark-serve-rank1")
    assert "--headless" in cmd, cmd
    rc, _ = node_exec(0, "docker inspect old-launcher")
    assert rc != 0, "the container holding the port was left"


def test_a_dead_worker_after_ready_is_reported_made_visible_by_the_watchdog_and_auto_restarted(deployed):
    """(d) vLLM's /health stays 200 with a dead worker: status.yml must say so at once, the head's watchdog must make
    the service visibly unhealthy (the head stopped, /health failing) without anyone running a playbook, and with
    the profile's auto_restart (the testbed profile sets it) serve again within one load time, every rank's compile
    cache wiped first (a file planted there is gone). The no-op rerun test that follows then proves that an
    auto-restarted pair is what the profile renders: nothing restarts."""
    sf.ensure_serving()
    _, config = node_exec(0, "cat /etc/spark-serve/watchdog.json")
    assert json.loads(config)["armed"] is True and json.loads(config)["auto_restart"] is True, config
    cache = json.loads(config)["engine_cache_dir"]
    planted = f"{cache}/written-by-the-engine-that-trips"
    for index in range(2):  # what the tripped engine left in vLLM's compile cache, on each rank
        assert node_exec(index, f"mkdir -p {cache} && touch {planted}")[0] == 0
    load_s = sf.last_load_s()
    result = sf.kill_worker_under_the_watchdog(while_dead=lambda: playbook("playbooks/status.yml"))
    rc, out = result["while_dead"]
    suspected = [e for e in result["events"] if e["event"] == "look failed"]
    unhealthy, restarted = [e for e in result["events"] if e["event"] != "look failed"]
    print(
        f"\n[dead worker after ready] /health right after the kill: {result['health_after_kill']}; status.yml "
        f"reported it; the watchdog made /health fail {result['seconds']} s after its start (no playbook run); "
        f"auto-restart took {restarted.get('seconds')} s (a fresh start's load: {load_s} s), a chat answered "
        f"{result['serving_again_s']} s after the watchdog's start"
    )
    assert result["health_after_kill"] == 200, "vLLM's /health still says 200 with a dead worker (the point)"
    assert rc != 0 and "node-1 (rank 1): exited" in out and "site.yml --tags deploy" in out, out[-3000:]
    assert result["seconds"] is not None and result["seconds"] < sf.watchdog_bound_s(), result
    assert unhealthy["event"] == "service unhealthy", unhealthy
    assert unhealthy["action"].startswith("stopping spark-serve-rank0") and unhealthy["recover"] == "auto-restart"
    seen = [problem for event in suspected + [unhealthy] for problem in event["problems"]]
    assert any("generation failed" in p or "is not running" in p for p in seen), result["events"]
    assert restarted["event"] == "auto-restart ready", restarted
    # One load (after a trip with an emptied compile cache, on cores the other shard shares), the stops, a generation.
    assert restarted["seconds"] < 2 * load_s + 60, restarted
    assert result["serving_again_s"] is not None and len(result["running"]) == 2, result
    left = [node_exec(index, f"ls {planted} {cache}.untrusted 2>/dev/null")[1].strip() for index in range(2)]
    assert left == ["", ""], f"the restart loaded a tripped engine's compile cache again: {left}"


def test_a_busy_service_is_never_stopped_by_the_watchdog(serving, monitored):
    """Every slot of the pair busy with long generations and as many requests queued behind them for 75 s (25 looks
    of the watchdog, which acts after 2 failed ones): it reads the engine's token counters instead of queueing a
    probe, and never trips; roles/monitoring's alerts stay quiet and nothing reaches the hook."""
    began = time.time()
    result = sf.busy_service_under_the_watchdog()
    alerts = sf.alerts_since(began)
    notified = [n for n in sf.notifications() if n[0] >= began and n[1] == "firing"]
    failed_looks = [e for e in result["events"] if e["event"] == "look failed"]
    trips = [e for e in result["events"] if e["event"] == "service unhealthy"]
    print(
        f"\n[busy service under the watchdog] {result['answered']} requests answered, {result['failed']} failed, "
        f"peak {result['peak_pending']:.0f} requests running or waiting; watchdog: {len(trips)} trips, "
        f"{len(failed_looks)} failed looks"
    )
    assert result["peak_pending"] > 4, "the load never filled every slot and queued more"
    assert result["answered"] >= 8, result
    assert trips == [] and failed_looks == [], result["events"]
    assert result["failed"] == 0 and result["same_head"], result
    assert alerts == [] and notified == [], (alerts, notified)


def test_every_recording_rule_dashboard_panel_and_watchdog_metric_has_series_on_the_served_pair(serving, monitored):
    """Right after the busy pair's load: each of roles/monitoring's recording rules, each query of its Grafana
    dashboard (every service selected), the watchdog's verdicts and the door's certificate end, as the test bed's
    Prometheus holds them. MTP acceptance has none: the tiny model drafts nothing, and the engine says so (its draft
    counter is absent too)."""
    _, rules = node_exec(1, "cat /etc/prometheus/spark-serve-rules.yml")
    groups = yaml.safe_load(rules)["groups"]
    recorded = [rule["record"] for group in groups for rule in group["rules"] if "record" in rule]
    empty = [name for name in recorded if not sf.query(name)]
    print(f"\n[monitoring] {len(recorded) - len(empty)} of {len(recorded)} recording rules have series; none: {empty}")
    assert recorded and all("acceptance" in name for name in empty), empty
    dashboard = json.loads((ROOT / "roles/monitoring/files/grafana-dashboard.json").read_text())
    queries = [(p["title"], t["expr"].replace("$service", ".*")) for p in dashboard["panels"] for t in p["targets"]]
    no_series = [title for title, expr in queries if not sf.query(expr)]
    print(f"[monitoring] {len(queries) - len(no_series)} of {len(queries)} dashboard queries have series")
    assert no_series == ["MTP acceptance"], no_series
    assert not sf.query("vllm:spec_decode_num_draft_tokens_total"), "a drafting engine: its acceptance must record"
    armed = sf.query('spark_serve_watchdog_armed{job="node"}')
    assert [(s["metric"]["node"], s["value"][1]) for s in armed] == [("node-0", "1")], armed
    ranks = sf.query('spark_serve_rank_container_running{job="node"}')
    running = sorted((s["metric"]["rank"], s["metric"]["host"], s["value"][1]) for s in ranks)
    assert running == [("0", "node-0", "1"), ("1", "node-1", "1")], ranks
    ends = sf.query("spark_serve_door_certificate_expiry_timestamp_seconds - time()")
    assert ends and float(ends[0]["value"][1]) > 30 * 86400, ends


def test_one_dropped_ping_is_noted_and_never_acted_on(serving):
    result = sf.one_dropped_ping_under_the_watchdog()
    failed = [e for e in result["events"] if e["event"] == "look failed"]
    print(f"\n[one dropped DF ping] watchdog events: {[e['event'] for e in result['events']]}")
    assert len(failed) == 1 and "drops DF pings" in failed[0]["problems"][0], result["events"]
    assert not [e for e in result["events"] if e["event"] == "service unhealthy"] and result["health"] == 200


@pytest.mark.parametrize("clients", [0, 6], ids=["idle", "under-load"])
def test_a_frozen_engine_core_is_found_by_the_watchdog_and_the_pair_restarted(serving, monitored, clients):
    """Alone proves the watchdog's two rules on a frozen engine core whose /health stays 200: idle, its probe request
    fails; under load, requests run or wait while no token counter moves. Each trip restarts the pair (one start
    each); the busy pair above is their negative control. The first trip reaches the monitoring hook as a firing
    SparkServeWatchdogTripped alert within 120 s of the freeze, and status.yml run then shows it firing; the inventory's
    notification command on the head gets the trip and the restart."""

    def alert_and_status(frozen_at):
        """At the trip, while the restart runs: the alert's notification and what status.yml shows meanwhile (the
        alert resolves a minute after the trip on the test bed, sooner than a busy bed's restart ends)."""
        alert = sf.notified("SparkServeWatchdogTripped", since=frozen_at, timeout_s=120)
        return alert, playbook("playbooks/status.yml")

    result = sf.engine_core_frozen_under_the_watchdog(clients=clients, on_trip=None if clients else alert_and_status)
    trip = next((e for e in result["events"] if e["event"] == "service unhealthy"), None)
    restarted = next((e for e in result["events"] if e["event"].startswith("auto-restart")), None)
    print(
        f"\n[engine core frozen, {clients} clients] the watchdog tripped {result['seconds']} s after the freeze: "
        f"{trip and trip['problems']}; {restarted and restarted['event']} in {restarted and restarted['seconds']} s; "
        f"clients: {result['load']}"
    )
    assert result["seconds"] is not None and result["seconds"] <= sf.watchdog_bound_s(), result["events"]
    busy = "request(s) running or waiting and no token progress"
    assert any((busy if clients else "generation failed") in p for p in trip["problems"]), trip
    assert restarted["event"] == "auto-restart ready", restarted
    told = sf.told_by_the_watchdog()
    assert trip in told and restarted in told, f"the notification command got {told}"
    if not clients:
        tripped, (_, out) = result["on_trip"]
        notified_s = tripped and round(tripped[0] - result["frozen_at"], 1)
        print(f"[engine core frozen] the alert reached the hook {notified_s} s after the freeze: {tripped}")
        assert tripped and tripped[3]["service"] == "testbed" and tripped[3]["node"] == "node-0", tripped
        assert "FIRING SparkServeWatchdogTripped (critical)" in out, out[-3000:]


@pytest.mark.extended
def test_a_deploy_stops_a_running_auto_restart_and_leaves_no_trip_behind(serving):
    """Alone proves the lock between the watchdog and a deploy: a deploy that finds the watchdog's automatic restart
    running takes the lock over and leaves no trip or failed look behind. It needs a trip and a deploy at once."""
    result = sf.deploy_during_an_auto_restart()
    events = [e["event"] for e in result["events"]]
    print(
        f"\n[deploy during an auto-restart] lock held by {result['lock_during'] and result['lock_during']['kind']} "
        f"when the deploy began; deploy rc {result['rc']}; watchdog events {events}; state after {result['state']}"
    )
    assert result["lock_during"] and result["lock_during"]["kind"] == "watchdog", result
    assert result["rc"] == 0, result["out"][-4000:]
    assert "took the lock over from watchdog by " in result["out"], result["out"][-4000:]
    assert result["lock_after"] == "" and result["health"] == 200
    assert not result["state"].get("tripped") and result["state"].get("failed_looks", 0) == 0, result["state"]


@pytest.mark.extended
def test_a_pair_whose_nodes_both_lost_power_serves_again_without_a_playbook_run(serving):
    """Alone proves the pair comes back after a reboot by default (the testbed profile leaves auto_restart unset):
    both nodes stop, the head boots first and its watchdog waits for the worker, which boots later; the fast link,
    the door and the restart key are back as a Spark's boot leaves them, and the watchdog restarts the ranks in the
    deploy's order. The no-op rerun that follows proves the pair then runs exactly what the profile renders."""
    _, config = node_exec(0, "cat /etc/spark-serve/watchdog.json")
    load_timeout_s = json.loads(config)["load_timeout_s"]
    load_s = sf.last_load_s()
    result = sf.power_cut(serving_timeout_s=load_timeout_s + 60)
    events = [e["event"] for e in result["events"]]
    ready = next((e for e in result["events"] if e["event"] == "auto-restart ready"), {})
    print(
        f"\n[power cut, both nodes] a chat answered {result['serving_s']} s after the cut (bound: the load timeout "
        f"{load_timeout_s} s + 60 s; a fresh start's load: {load_s} s); the watchdog waited "
        f"{ready.get('waited_for_workers_s')} s for the worker, its restart took {ready.get('seconds')} s; "
        f"events {events}; fast links {result['fast_links']}"
    )
    assert result["waited"], f"the head's watchdog never waited for the worker that was still off: {events}"
    unhealthy = next(e for e in result["events"] if e["event"] == "service unhealthy")
    assert unhealthy["problems"] == ["head container spark-serve-rank0 is not running"], unhealthy
    waits = next(e for e in result["events"] if e["event"] == "auto-restart waits")
    assert waits["waiting_for"][0].startswith("node-1 ("), waits
    assert events[-1] == "auto-restart ready", events
    assert result["serving_s"] is not None, result
    assert len(result["running"]) == 2, result
    for index, link in enumerate(result["fast_links"]):
        assert link and link[1] == sf.FAST_MTU and link[2].startswith(f"10.253.{16 * int(sf.INSTANCE) + 1}."), (
            f"node-{index}: {link}"
        )


def test_rerun_with_nothing_changed_restarts_nothing(serving):
    result = sf.noop_rerun()
    print(f"\n[no-op rerun] {result['seconds']:.0f} s, changed={result['changed']}, restarts={result['restarts']}")
    assert result["rc"] == 0, result["out"][-6000:]
    assert result["changed"] == 0 and result["restarts"] == 0, sf.recap(result["out"])
    run_the_printed_client_commands(result["out"])


def run_the_printed_client_commands(out):
    """The deploy's last lines name the door, the model and the key's file, and their curl and OpenAI SDK commands
    answer through the door's TLS as printed, trusting its CA (--cacert, SSL_CERT_FILE). The pair takes no key here;
    the key read from its file is proven in tests/unit/test_client_examples.py."""
    lines = sf.printed_msg(out, "How clients reach the service")
    assert lines, out[-3000:]
    # They are the run's last lines: no play or task follows them before the recap (the output holds stdout, then
    # stderr: Ansible's warnings, printed where they arose, are not in this order here).
    after = out.split("TASK [How clients reach the service]", 1)[1]
    assert [line.split(" ", 2)[:2] for line in re.findall(r"^(?:PLAY|TASK) .*$", after, re.M)] == [["PLAY", "RECAP"]]
    assert lines[0] == f"endpoint {sf.HEAD}/v1, served model name tiny-llama", lines
    commands = {line.split(": ", 1)[0]: line.split(": ", 1)[1] for line in lines if line.startswith(("curl", "Open"))}
    assert len(commands) == 2 and all(str(sf.DOOR_CA) in c for c in commands.values()), commands
    for label, command in commands.items():
        # The printed SDK command says python3: this interpreter has the openai package.
        runnable = command.replace("python3 -c", f"{sys.executable} -c")
        started = time.monotonic()
        proc = subprocess.run(["bash", "-c", runnable], cwd="/", capture_output=True, text=True, timeout=120)
        print(f"\n[client example] {label}: rc {proc.returncode} in {time.monotonic() - started:.1f} s")
        assert proc.returncode == 0, f"{label}: {command}\n{proc.stderr}{proc.stdout}"
        assert proc.stdout.strip(), label


def test_what_validate_shows_is_what_runs_on_every_rank(serving):
    ranks = sf.validated_vs_running(sf.PAIR, "testbed", 2)
    print(f"\n[validate spec vs docker inspect, pair] {ranks}")
    assert [r["differences"] for r in ranks] == [[], []], ranks
    for rank in ranks:  # the fabric's two node facts, filled in by the node that verified its link
        assert sorted(m.split("=")[0] for m in rank["marked"]) == ["NCCL_IB_GID_INDEX", "NCCL_IB_HCA"], rank


def test_check_diff_shows_what_a_changed_profile_would_change_and_changes_nothing(serving):
    records = sorted((ROOT / ".testbed" / sf.INSTANCE / "spark-serve" / "records").glob("*.json"))
    before = [sf.container_identity(i) for i in range(2)]
    overrides = json.dumps({"spark_serve_profile_overrides": {"engine": {"max_num_seqs": 3}}})
    rc, out = sf.deploy("--check", "--diff", "-e", overrides)
    assert rc == 0, out[-6000:]
    compose_diffs = re.findall(r"^\+\+\+ after: \S+compose\.yaml\.j2\n(?:.*\n)*?\+    command: (.*)$", out, re.M)
    assert len(compose_diffs) == 2 and all('"--max-num-seqs", "3"' in c for c in compose_diffs), out[-6000:]
    assert "nothing was started, gated or recorded" in out, out[-3000:]
    assert [sf.container_identity(i) for i in range(2)] == before and sf.health() == 200
    assert sorted((ROOT / ".testbed" / sf.INSTANCE / "spark-serve" / "records").glob("*.json")) == records


def test_stale_overlay_is_refused_before_the_running_service_is_touched(serving, tmp_path):
    before = [sf.container_identity(i) for i in range(2)]
    image_file = sf.image_source("platforms/interface.py")
    stale_text, removed = sf.without_method(image_file, "Platform", "validate_environ")
    (tmp_path / "interface_stale.py").write_text(stale_text)
    (tmp_path / "interface_upstreamed.py").write_text("# our fix, merged upstream since\n" + image_file)
    overlays = [
        {"src": str(tmp_path / "interface_stale.py"), "dest": f"{sf.IMAGE_VLLM}/platforms/interface.py"},
        {"src": str(tmp_path / "interface_upstreamed.py"), "dest": f"{sf.IMAGE_VLLM}/platforms/interface.py"},
        {"src": str(tmp_path / "interface_upstreamed.py"), "dest": f"{sf.IMAGE_VLLM}/platforms/gone.py"},
    ]
    started = time.monotonic()
    rc, out = sf.deploy("-e", json.dumps({"spark_serve_profile_overrides": {"overlays": overlays}}))
    print(
        f"\n[stale overlay] refused after {time.monotonic() - started:.1f} s (missing {removed}); "
        "the running service was not touched"
    )
    assert rc != 0
    assert "2 overlay problem(s)" in out, out[-4000:]
    assert f"overlays[0] ({overlays[0]['src']} -> {overlays[0]['dest']}): lacks 1 name(s)" in out
    assert removed in out
    assert "overlays[2]" in out and "the image has no file at" in out
    assert "overlays[1]" in out and "obsolete" in out
    assert [sf.container_identity(i) for i in range(2)] == before
    assert sf.health() == 200


def test_wrong_master_address_is_refused_before_the_running_service_is_touched(serving):
    """(b) A master address nobody holds would leave the workers trying the TCPStore for 60 s mid-start."""
    result = sf.wrong_master_address()
    out, nobody = result["out"], result["address"]
    print(f"\n[wrong master address] refused after {result['seconds']:.1f} s, nothing started")
    assert result["rc"] != 0
    assert f"vllm_service_master_addr {nobody}: must be an address of the head node-0" in out, out[-4000:]
    assert f"vllm_service_master_addr {nobody}: must answer a ping from worker node-1" in out, out[-4000:]
    assert "Nothing was started; the running service is untouched." in out
    assert result["untouched"] and sf.health() == 200


def test_the_master_port_and_fabric_ports_answer_only_the_fast_link(serving):
    """roles/fabric_firewall: the head's rendezvous (TCPStore, pickle-based) and the ports its ranks listen on answer
    neither another node's LAN address nor the controller; over the fast link the master port answers."""
    ports = sf.fabric_ports(0)
    assert sf.MASTER_PORT in ports, f"the head's master port is not listening while the pair serves: {ports}"
    # It listens on the LAN address too (the head reaches itself there): only the firewall keeps others out.
    assert sf.answering_from_node(0, sf.HEAD_LAN, [sf.MASTER_PORT]) == [sf.MASTER_PORT]
    from_lan = sf.answering_from_node(1, sf.HEAD_LAN, ports)
    from_controller = sf.answering_from_controller(sf.HEAD_LAN, ports)
    from_fast_link = sf.answering_from_node(1, sf.HEAD_FAST, [sf.MASTER_PORT])
    print(
        f"\n[fabric firewall] head listens on {ports}; answered node-1 via LAN {from_lan}, "
        f"controller {from_controller}, node-1 via fast link {from_fast_link}"
    )
    assert from_lan == [] and from_controller == [], (from_lan, from_controller)
    assert from_fast_link == [sf.MASTER_PORT]
    _, table = node_exec(0, "nft list table inet spark_serve_fabric")
    assert f"ip saddr 10.253.{16 * int(sf.INSTANCE) + 1}.0/24 accept" in table, table
    local_users_reach_no_engine_port()
    assert sf.health() == 200


def local_users_reach_no_engine_port():
    """On each node, every listener the ranks opened in the master port and the ephemeral range (the TCPStore, vLLM's
    message queues with every prompt, Gloo), on loopback and on the fast-link address, refuses an unprivileged local
    user, while root reaches the head's master port there (only it: a stray connection to a Gloo listener is not the
    test's to make) and the ranks, which run as root, keep serving: the pair answers a chat after."""
    for index in range(2):
        listeners = sf.engine_listeners(index)
        assert listeners, f"node-{index}: no engine listener to try"
        by_address = {a: [p for b, p in listeners if b == a] for a, _ in listeners}
        nobody = {a: sf.answering_from_node(index, a, ports, as_user=sf.AS_NOBODY) for a, ports in by_address.items()}
        print(f"\n[node-{index}, an unprivileged local user] {len(listeners)} engine listeners, reached: {nobody}")
        assert all(reached == [] for reached in nobody.values()), nobody
    masters = [a for a, p in sf.engine_listeners(0) if p == sf.MASTER_PORT]
    assert masters and all(sf.answering_from_node(0, a, [sf.MASTER_PORT]) == [sf.MASTER_PORT] for a in masters)
    with sf.post("/v1/chat/completions", sf.DOOR_CHAT) as response:
        assert response.status == 200


def pair_records():
    return sorted((ROOT / ".testbed" / sf.INSTANCE / "spark-serve" / "records").glob("*-testbed-pair-*.json"))


def test_a_worker_frozen_alone_mid_start_is_found_within_30_s_and_the_last_good_deployment_serves_again(deployed):
    """(k) Only rank 1's worker process stopped mid-start while its server process and rank 0 sleep waiting, so no
    rank is frozen whole: only the idle rule finds it (the stage budget took 113 s). With the profile's rollback on,
    the last good deployment serves again with no playbook run by hand, the failed start's record kept: this test
    alone proves the rollback after a failed start (the other fault tests turn it off), and the worker rank frozen
    whole is no test of its own any more (the freeze rule it needs is the head-frozen case's)."""
    before = pair_records()
    result = sf.worker_process_frozen_during_start()
    out = result["out"]
    assert result["seconds"] is not None, out[-4000:]
    print(
        f"\n[worker process frozen alone mid-start] detected {result['seconds']:.1f} s after the fault "
        f"(engine's own timeout {sf.TESTBED_TIMEOUT_S} s); the run, with its rollback, ended {result['ended_s']:.0f} s "
        "after the DETECTED line"
    )
    assert result["rc"] != 0 and result["seconds"] < 30, out[-4000:]
    assert "rank 1 (node-1) failed first" in out and "no rank has made progress for" in out, out[-4000:]
    assert re.search(r"rank 1 \(node-1\) is furthest behind \([^)]*\): .*\(pid \d+, state T\)", out), out[-4000:]
    assert "Rolled back to" in out and "it passed the gate again and serves now" in out, out[-4000:]
    new = [json.loads(path.read_text()) for path in pair_records() if path not in before]
    assert [(r["kind"], r["status"]) for r in new] == [("deploy", "failed"), ("rollback", "passed")], new
    assert result["cache_intact"], "the model cache must stay"
    assert sf.health() == 200 and all(sf.engine_containers(i) for i in range(2))
    with sf.post("/v1/chat/completions", sf.chat("back after the rollback?", max_tokens=4)) as response:
        assert json.load(response)["usage"]["completion_tokens"] > 0


def test_a_second_deploy_is_refused_within_5_s_naming_the_first(serving):
    """Alone proves the deploy lock between two controllers: a second deploy started while the first restarts the
    pair is refused within 5 s, naming the first's host and pid, and touches nothing (one start: the first's). It
    leaves the pair on a changed argument: the next test deploys a change of its own, and no test after it in the
    service shard reruns the shipped profile as a no-op."""
    result = sf.two_deploys_at_once()
    (first_rc, first_out), (second_rc, second_out) = result["first"], result["second"]
    print(f"\n[two deploys at once] the second was refused {result['refused_s']} s after its lock task")
    assert first_rc == 0, first_out[-4000:]
    assert second_rc != 0 and result["refused_s"] is not None and result["refused_s"] < 5, second_out[-4000:]
    assert f"deploy by {socket.gethostname()} pid {result['first_pid']} (ansible-playbook " in second_out
    assert "[vllm] staged start" not in second_out, "the second touched nothing"


def test_restart_with_streams_in_flight_and_an_api_key_that_never_leaks(serving, tmp_path):
    """(e) A change that restarts every rank while streaming requests run finishes without a hang; the same deploy
    turns on an API key, which must then guard the API and appear nowhere it must not. Behind the door the key never
    reaches the head's engine: no file on either node holds it, and the engine checks its own key, which the door
    sends. Then the door's keys change under the watchdog without the engine (door_keys_rotated_under_streams)."""
    secret = f"sk-spark-serve-{time.time_ns()}"
    key_file = tmp_path / "api.key"
    key_file.write_text(secret + "\n")
    streams = [sf.Stream(max_tokens=1500) for _ in range(2)]
    sf.start_streams(streams)
    started = time.monotonic()
    restarted = {"vllm_service_api_key_file": str(key_file), **sf.RESTARTED}
    rc, out = sf.deploy("-e", json.dumps(restarted))
    seconds = time.monotonic() - started
    sf.join_streams(streams)
    print(
        f"\n[restart with 2 streams in flight] site.yml deploy {seconds:.0f} s; streams ended "
        f"{[round(s.ended - started, 1) for s in streams]} s into it after {[s.tokens for s in streams]} chunks "
        f"(finish reason / error: {[s.error or s.finish_reason for s in streams]})"
    )
    assert rc == 0, out[-6000:]
    assert "ready: /health 200 and all 2 rank(s) running" in out
    assert all(s.ended - started < seconds for s in streams), "a stream outlived the restart"

    with pytest.raises(urllib.error.HTTPError) as refused:
        sf.post("/v1/chat/completions", sf.chat("no key"))
    assert refused.value.code == 401
    with sf.post("/v1/chat/completions", sf.chat("with key"), api_key=secret) as response:
        assert response.status == 200
    engine_key = sf.ENGINE_KEY.read_text().strip()
    assert engine_key != secret and len(engine_key) >= 32
    for key, label in ((secret, "the API key"), (engine_key, "the engine key")):
        leaks = {place: shown for place, shown in sf.where_the_key_shows(key).items() if shown}
        assert leaks == {}, (label, leaks)
        assert key not in out, f"{label} appeared in the playbook's output"
        nothing_written_holds(
            key, label, on_nodes_besides=() if key == secret else ("secrets.env", "upstream-key.conf")
        )
    for held_by in ("secrets.env", "front-door/upstream-key.conf", "front-door/tenants.conf"):  # engine, door, door
        _, mode = node_exec(0, f"stat -c '%a %U' /etc/spark-serve/{held_by}")
        assert mode.split() == ["600", "root"], (held_by, mode)
    the_front_door_is_closed_to_another_node(secret)
    only_the_door_reaches_the_engine_on_the_head(secret)
    door_keys_rotated_under_streams(secret, tmp_path)
    a_certificate_near_its_end_is_warned_and_replaced_by_the_door(tmp_path)


def a_certificate_near_its_end_is_warned_and_replaced_by_the_door(tmp_path):
    """The head serving a certificate from the same CA that ends in 10 days: status.yml warns (and still passes);
    playbooks/door.yml puts the controller's issued certificate back, and the warning is gone."""
    ca = sf.DOOR_CA.parent
    short = tmp_path / "short.pem"
    csr = tmp_path / "short.csr"
    rc, out = run(["openssl", "req", "-new", "-key", str(ca / "node-0.key"), "-subj", "/CN=node-0", "-out", str(csr)])
    assert rc == 0, out
    rc, out = run(
        ["openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca / "ca.pem"), "-CAkey", str(ca / "ca.key"),
         "-days", "10", "-out", str(short)]
    )  # fmt: skip
    assert rc == 0, out
    node_exec(0, f"cat > /etc/spark-serve/front-door/server.pem <<'EOF'\n{short.read_text()}EOF\nnginx -s reload")
    rc, out = playbook("playbooks/status.yml", sf.PAIR)
    assert rc == 0, out[-4000:]
    assert "WARNING the door's certificate on node-0 ends" in out and "within 30 days" in out, out[-4000:]
    rc, out = sf.door_run()
    assert rc == 0, out[-4000:]
    rc, out = playbook("playbooks/status.yml", sf.PAIR)
    assert rc == 0 and "WARNING the door's certificate" not in out, out[-4000:]


def only_the_door_reaches_the_engine_on_the_head(key):
    """On the head itself, an unprivileged user (nobody) reaches none of vLLM's paths on loopback, the keyless ones
    included (roles/front_door's loopback guard), while the door answers that same user; root (the watchdog,
    status) still reads /health there."""
    as_nobody = "setpriv --reuid=65534 --regid=65534 --clear-groups"
    curl = "curl -s -o /dev/null -w '%{http_code}' -m 10"
    statuses = {}
    for path in ("/tokenize", "/invocations", "/v1/models", "/health"):
        _, out = node_exec(0, f"{as_nobody} {curl} http://127.0.0.1:8000{path}")
        statuses[f"nobody 127.0.0.1:8000{path}"] = out.strip()
    node_exec(0, f"cat > /tmp/door-ca.pem <<'EOF'\n{sf.DOOR_CA.read_text()}EOF\nchmod 644 /tmp/door-ca.pem")
    _, out = node_exec(
        0, f"{as_nobody} {curl} --cacert /tmp/door-ca.pem -H 'Authorization: Bearer {key}' {sf.HEAD}/v1/models"
    )
    statuses["nobody door /v1/models"] = out.strip()
    _, out = node_exec(0, f"{curl} http://127.0.0.1:8000/health")
    statuses["root 127.0.0.1:8000/health"] = out.strip()
    print(f"\n[on the head, behind the door] {statuses}")
    assert {name: code for name, code in statuses.items() if name.startswith("nobody 127")} == {
        name: "000" for name in statuses if name.startswith("nobody 127")
    }, statuses
    assert statuses["nobody door /v1/models"] == "200" and statuses["root 127.0.0.1:8000/health"] == "200", statuses


def nothing_written_holds(key, label, on_nodes_besides):
    """Everything the project writes on the controller (failed-start logs, rendered arguments, deployment records)
    and on the nodes (the compose project, the door, records, nginx), except the files named, never holds the key."""
    written = [
        path
        for folder in (ROOT / ".spark-serve", ROOT / ".testbed" / sf.INSTANCE / "spark-serve")
        for path in folder.rglob("*")
        if path.is_file() and path != sf.ENGINE_KEY
    ]
    assert any(path.parent.name == "records" for path in written), "the deploy wrote no record to check"
    for path in written:
        assert key not in path.read_text(errors="replace"), f"{label} was written to {path}"
    excluded = " ".join(f"--exclude={name}" for name in on_nodes_besides)
    for index in range(2):
        _, hits = node_exec(
            index, f"grep -rls {excluded} -e '{key}' /etc/spark-serve /var/lib/spark-serve/records /etc/nginx; true"
        )
        assert hits.strip() == "", f"node-{index}: {label} was written to {hits}"


def the_front_door_is_closed_to_another_node(key):
    """From node-1, as any host on the LAN: every /v1 path needs the key, nothing else but /health is forwarded,
    plain HTTP reaches nothing; /metrics answers the controller and node-1 as the inventory's monitoring host
    (front_door_metrics_allow's default), and no other host on the LAN (the test bed's services host)."""
    statuses = sf.door_from_node(1, key)
    table = "; ".join(f"{path} {label}: {code}" for (path, label), code in statuses.items())
    print(f"\n[front door from node-1] {table}")
    for (path, label), code in statuses.items():
        if path.startswith("/v1/"):
            assert code == ("200" if label == "key" else "401"), (path, label, code)
        elif path in ("/invocations", "/tokenize"):
            assert code == "404", (path, label, code)  # never forwarded, whatever the key
        elif path in ("/metrics", "/health"):  # /metrics: node-1 is the monitoring host
            assert code == "200", (path, label, code)
    assert statuses[("plain http", 8443)] == "301", "plain HTTP to the door must be redirected to https"
    assert statuses[("plain http", 8000)] == "000", "vLLM's own port must not answer another host"
    assert sf.metrics_value("vllm:num_requests_running") is not None, "/metrics must answer the controller"
    assert sf.door_metrics_from_the_services_host() == "403", "/metrics must refuse a host that is not named"


def a_bundle_of_the_serving_pair_holds_no_key(key, with_key):
    """playbooks/bundle.yml at -vvv with the key on: every rank's log and stacks, and `key` (the engine's: the head's
    `docker inspect` carries it in the engine's env), its digest and its env line nowhere in the output or the
    bundle."""
    started = time.monotonic()
    rc, out, found = sf.bundle("-vvv", *with_key)
    print(f"[playbooks/bundle.yml at -vvv with the key on] {time.monotonic() - started:.0f} s, {len(found)} files")
    assert rc == 0, out[-4000:]
    assert {f"nodes/node-{i}/{name}" for i in range(2) for name in ("rank.log", "rank.stacks.txt")} <= set(found)
    assert b"<redacted>" in found["nodes/node-0/rank.inspect.json"], "the head's env had the key to hide"
    digest = hashlib.sha256(key.encode()).hexdigest()
    assert key not in out and digest not in out
    assert [name for name, data in found.items() if key.encode() in data or digest.encode() in data] == []


def door_keys_rotated_under_streams(old, tmp_path):
    """The operator's key rotated by playbooks/door.yml at -vvv while 4 clients stream with the old one, under the
    watchdog: every stream ends whole (0 failed requests), then the old key gets 401 and the new one 200; the engine
    is never restarted and the watchdog never trips. Then named tenants: one over its rate gets 429, one revoked
    gets 401 while the other keeps 200; and the keys withdrawn. No run prints the key or its digest."""
    new = f"sk-spark-serve-rotated-{time.time_ns()}"
    (tmp_path / "rotated.key").write_text(new + "\n")
    with_key = ("-e", json.dumps({"vllm_service_api_key_file": str(tmp_path / "rotated.key")}))
    engines = [sf.container_identity(i) for i in range(2)]
    stop = sf.fresh_watchdog()
    try:
        streams = [sf.Stream(max_tokens=1200, api_key=old) for _ in range(4)]

        def on_line(line, marks):
            """The streams start as nginx's new configuration is checked, so the reload comes in their middle."""
            if line.startswith("TASK [front_door : Check the whole nginx configuration") and "streams" not in marks:
                marks["streams"] = time.monotonic()
                sf.start_streams(streams)
            if line.startswith("TASK [front_door : Check that the door lets the configured key through"):
                marks.setdefault("reloaded", time.monotonic())

        started = time.monotonic()
        # -vvv: every result and module argument shown; the key never is.
        rc, out, marks = sf.watched_run(["-i", sf.PAIR, "playbooks/door.yml", "-vvv", *with_key], on_line, 300)
        seconds = time.monotonic() - started
        assert rc == 0, out[-6000:]
        assert "streams" in marks and "reloaded" in marks, "the door's configuration was not reloaded"
        sf.join_streams(streams)
        print(
            f"\n[door keys rotated with 4 streams in flight] playbooks/door.yml at -vvv {seconds:.1f} s; streams "
            f"started {marks['streams'] - started:.1f} s into it, nginx reloaded by {marks['reloaded'] - started:.1f} "
            f"s, streams ended {[round(s.ended - started, 1) for s in streams]} s, {[s.tokens for s in streams]} "
            f"chunks, {sum(not s.whole() for s in streams)} failed"
        )
        assert [s.error for s in streams if not s.whole()] == [], [vars(s) for s in streams]
        assert all(s.ended > marks["reloaded"] for s in streams), "a stream ended before the reload: it proves nothing"
        assert answers(old) == 401 and answers(None) == 401 and answers(new) == 200
        digest = hashlib.sha256(new.encode()).hexdigest()
        assert new not in out and old not in out and digest not in out
        for play in ("playbooks/status.yml", "playbooks/diagnose.yml"):
            started = time.monotonic()
            rc, shown = playbook(play, sf.PAIR, "-vvv", *with_key)
            print(f"[{play} at -vvv with the key on] rc {rc}, {time.monotonic() - started:.0f} s, {len(shown)} chars")
            assert rc == 0, shown[-4000:]
            assert new not in shown and digest not in shown, f"{play} printed the key or its digest at -vvv"
        a_bundle_of_the_serving_pair_holds_no_key(sf.ENGINE_KEY.read_text().strip(), with_key)
        tenants_limited_and_revoked_alone(tmp_path, with_key)

        rc, out = sf.door_run()
        assert rc == 0, out[-4000:]
        assert answers(None) == 200, "with every key withdrawn the door lets anyone through"
        assert [sf.container_identity(i) for i in range(2)] == engines, "a door change restarted the engine"
    finally:
        node_exec(0, stop)
    assert sf.watchdog_events() == [], "the watchdog tripped on a door change"


def answers(key):
    """The door's status for a short chat with `key` (None: no Authorization header)."""
    try:
        with sf.post("/v1/chat/completions", sf.chat("which key?", max_tokens=2), api_key=key) as response:
            return response.status
    except urllib.error.HTTPError as refused:
        return refused.code


# The test bed's profile shows cached_tokens (the prefix-cache tests read it): tenants on its shared cache must say so.
SHARED_CACHE_HITS = {"spark_serve_profile_overrides": {"allow_cached_tokens_across_tenants": True}}


def tenants_limited_and_revoked_alone(tmp_path, with_key):
    """Two tenants beside the operator: alice at 6 requests a minute, no burst; bob unlimited. Alice's second
    request within 10 s gets 429, bob's keep 200; then alice revoked gets 401 while bob and the operator keep 200."""
    keys = {name: f"sk-tenant-{name}-{time.time_ns()}" for name in ("alice", "bob")}
    for name, key in keys.items():
        (tmp_path / f"{name}.key").write_text(key + "\n")
    tenants = [
        {"name": "alice", "key_file": str(tmp_path / "alice.key"), "requests_per_minute": 6},
        {"name": "bob", "key_file": str(tmp_path / "bob.key")},
    ]
    rc, out = sf.door_run(*with_key, "-e", json.dumps({"vllm_service_tenants": tenants, **SHARED_CACHE_HITS}))
    assert rc == 0, out[-4000:]
    statuses = [answers(keys["alice"]) for _ in range(3)] + [answers(keys["bob"]) for _ in range(3)]
    print(f"\n[tenants] alice at 6/min: {statuses[:3]}; bob unlimited: {statuses[3:]}")
    assert statuses == [200, 429, 429, 200, 200, 200], statuses
    tenants[0]["revoked"] = True
    started = time.monotonic()
    rc, out = sf.door_run(*with_key, "-e", json.dumps({"vllm_service_tenants": tenants, **SHARED_CACHE_HITS}))
    print(f"[tenants] alice revoked by playbooks/door.yml in {time.monotonic() - started:.1f} s")
    assert rc == 0, out[-4000:]
    assert (answers(keys["alice"]), answers(keys["bob"])) == (401, 200)
    assert all(key not in out for key in keys.values())


def assert_found_and_stopped(result, label, bound_s, blamed, engine_timeout_s=sf.GLOO_TIMEOUT_S):
    """A failed start: found within bound_s of the fault, blaming `blamed`, every rank stopped, the cache kept, the
    logs collected. Prints the figure and its ratios to the engine's own timeouts; returns the playbook output."""
    out = result["out"]
    assert result["seconds"] is not None, out[-4000:]
    print(
        f"\n[{label}] detected {result['seconds']:.1f} s after the fault (engine's own timeout: {engine_timeout_s} s, "
        f"ratio {result['seconds'] / engine_timeout_s:.4f}; vs 601 s {result['seconds'] / sf.NCCL_TIMEOUT_S:.4f})"
    )
    print(f"[{label}] the run ended {result['ended_s']:.0f} s after the DETECTED line")
    assert result["rc"] != 0
    assert result["seconds"] < bound_s, out[-4000:]
    assert f"{blamed} failed first" in out, out[-4000:]
    assert "Nothing serves now: every rank was stopped" in out, out[-4000:]
    assert result["running"] == [], "a rank was left running"
    assert result["cache_intact"], "the model cache must stay"
    assert result["worker_logs"], "the failed ranks' logs must be collected on the controller"
    return out


# A dead worker is found within a minute of its exit, where the engine itself waits 1801 s; the figure itself is a
# benchmark's (tests/bench/start_faults_bench.py): under CI load the watch's first look can come 10+ s after the exit.
# A worker killed mid-start is the quad's test (tests/testbed/test_service_quad.py): the same path with three peers.
def test_worker_that_cannot_start_is_found_in_seconds(deployed, tmp_path):
    """Alone proves a failed start explained in the engine's own words: a rank whose engine dies at import (an
    overlay that raises) is found from its exit, and the reason comes from that rank's log."""
    result = sf.worker_cannot_start(tmp_path)
    out = assert_found_and_stopped(result, "worker cannot start", sf.GLOO_TIMEOUT_S / 30, "rank 1 (node-1)")
    assert "overlay breaks the import" in out, "the reason must come from the worker's own log"
    a_bundle_of_the_failed_start_holds_every_ranks_log_and_the_stacks_at_the_failure()


def a_bundle_of_the_failed_start_holds_every_ranks_log_and_the_stacks_at_the_failure():
    """playbooks/bundle.yml with nothing running (the failed start removed every rank's container): the staged
    start's newest failure folder with every rank's log (the worker's with its traceback) and the stacks of the rank
    that still ran, each node's kernel lines, and the manifest saying why no rank has a log or stacks of its own."""
    started = time.monotonic()
    rc, out, found = sf.bundle()
    print(f"[playbooks/bundle.yml after the failed start] {time.monotonic() - started:.0f} s, {len(found)} files")
    assert rc == 0, out[-4000:]
    failure = max(name.split("/")[2] for name in found if name.startswith("controller/failed-starts/"))
    logs = {name.rsplit("/", 1)[1]: data for name, data in found.items() if f"/failed-starts/{failure}/" in name}
    assert {"rank0-node-0.log", "rank1-node-1.log"} <= set(logs), sorted(logs)
    assert b"overlay breaks the import" in logs["rank1-node-1.log"] and b"=== pid" in logs["rank0-node-0.stacks.txt"]
    assert {f"nodes/node-{i}/kernel.txt" for i in range(2)} <= set(found), sorted(found)
    assert "node-1: rank.stacks.txt: the container does not run" in found["MANIFEST.txt"].decode()


def test_a_node_short_of_memory_is_refused_naming_both_numbers_before_any_rank_starts(deployed):
    """Alone proves the memory guard at the start on real nodes: the staged start reads each node's MemAvailable once
    the old ranks are gone and refuses the one below the profile's need (here VLLM_CPU_KVCACHE_SPACE 1 GiB + the
    1 GiB margin), naming it and both numbers; no rank starts, and the refusal costs no model load."""
    result = sf.node_short_of_memory()
    out = result["out"]
    print(f"\n[node short of memory] refused after {result['seconds']:.0f} s of deploy")
    assert result["rc"] != 0, out[-4000:]
    assert (
        "rank 1 (node-1): 1.0 GiB of memory available (MemAvailable), the profile takes 2.0 GiB "
        "(VLLM_CPU_KVCACHE_SPACE 1 GiB + 1 GiB margin (memory_margin_gib))" in out
    ), out[-4000:]
    assert "rank 0 (node-0):" not in out.split("not enough memory to start")[1].split("\n")[0]
    assert "Nothing serves now" in out and result["running"] == [] and result["cache_intact"], out[-4000:]
    assert "[vllm] REFUSED: not enough memory" in out, out[-4000:]
    assert not [line for line in out.splitlines() if sf.LOOK.match(line)], "the start watch looked at started ranks"


# The stalls: a rank alive but unable to talk, or frozen. Each fault comes mid-start and must be found within 30 s,
# blaming the right node, where the engine itself would wait out its collective timeout (300 s here, 601 s NCCL on
# Sparks). A worker rank frozen whole is (k) above, which stops less of it (its worker process only) and needs the
# idle rule; the head frozen whole proves the freeze rule on the rank the other waits for. An MTU lowered mid-start
# takes the link-down path (the same sysfs read at every look; tests/unit/test_rank_watch.py holds the MTU rule, and
# tests/bench/start_faults_bench.py still times it on the test bed).
STALLS = {
    "link-down": (sf.link_down_during_start, "rank 1 (node-1)", "fast link enp1s0f1np1 is down"),
    "head-frozen": (
        lambda: sf.rank_frozen_during_start(0),
        "rank 0 (node-0)",
        "every process stopped (state T), 0.0 CPU s and 0 bytes of I/O in",
    ),
    "master-port-dropped": (
        sf.master_port_dropped_during_start,
        "rank 0 (node-0)",
        "master port 10.253.{}.10:29501 does not accept connections from node-1",
    ),
}


# The head frozen whole is the frozen-process rule of the worker frozen alone above: in the extended suite.
@pytest.mark.parametrize(
    "fault", [pytest.param(f, marks=[pytest.mark.extended] if f == "head-frozen" else []) for f in STALLS]
)
def test_a_stall_mid_start_is_found_within_30_s_blaming_the_right_node(deployed, fault):
    """Each stall alone proves one rule of the start watch, none of which sees a rank exit: the fast link's state
    (link down), every process of the head stopped (head frozen), the master port unreachable from the worker."""
    scenario, blamed, reason = STALLS[fault]
    result = scenario()
    out = assert_found_and_stopped(result, f"{fault} mid-start", 30, blamed, sf.TESTBED_TIMEOUT_S)
    assert reason.format(16 * int(sf.INSTANCE) + 1) in out, out[-4000:]
    before_detection = out.split("DETECTED")[0].split("staged start")[-1]
    progress = [line for line in before_detection.splitlines() if " | rank " in line]  # the per-rank stage lines
    assert progress and not [line for line in progress if "compiling/capturing" in line], (
        "a stage the logs never showed"
    )
