"""A fleet on the test bed: two single-node replicas (node-0, node-1) behind vLLM's router on node-2, brought up by
`site.yml -i inventories/testbed-fleet` and rolled out one replica at a time under a load of multi-turn sessions."""

import contextlib
import json
import os
import re
import ssl
import sys
import time
import urllib.error
import urllib.request

import pytest
from ansible.module_utils.door_keys import member_credential

from tests.testbed import fleet_standins
from tests.testbed import service_faults as sf
from tests.testbed.fleet_load import SessionLoad, p95, stream_chat
from tests.testbed.helpers import INSTANCE, ROOT, node_exec, playbook, run

# Scale: in the extended suite (make test-extended), not in make test (docs/tests.md says why).
pytestmark = [pytest.mark.testbed, pytest.mark.extended]
FLEET = "inventories/testbed-fleet"
NET = f"10.253.{16 * int(INSTANCE)}"
ROUTER = f"https://{NET}.12:8443"
REPLICAS = {"a": f"https://{NET}.10:8443", "b": f"https://{NET}.11:8443"}
FLEET_DIR = ROOT / ".testbed" / INSTANCE / "fleet"
CA = FLEET_DIR / "front-door" / "ca.pem"
KEY_FILE = FLEET_DIR / "api-key"
ADMIN_KEY_FILE = FLEET_DIR / "router-admin-key"  # the router's admin API's own key (roles/vllm_router makes it)


def get(url, path, timeout=10, key=None):
    """(status, body) of GET url+path, verified with the fleet's CA; the router's admin paths with its admin key."""
    context = ssl.create_default_context(cafile=CA)
    key = key or (ADMIN_KEY_FILE.read_text().strip() if url == ROUTER and not path.startswith("/v1") else None)
    request = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def members():
    status, body = get(ROUTER, "/list_workers")
    assert status == 200, body
    return sorted(json.loads(body)["urls"])


def replica_identity(index):
    rc, out = node_exec(index, "docker inspect -f '{{.Id}} {{.State.StartedAt}}' spark-serve-rank0")
    return out.strip() if rc == 0 else None


def fleet_run(*extra, timeout=3600):
    started = time.monotonic()
    rc, out = playbook("site.yml", FLEET, *extra, timeout=timeout)
    return rc, out, time.monotonic() - started


@pytest.fixture(scope="module")
def fleet(testbed):
    rc, out = run([sys.executable, str(ROOT / "tests/testbed/testbed.py"), "up", "--nodes", "3"], timeout=1800)
    assert rc == 0, out[-3000:]
    rc, out = run([sys.executable, str(ROOT / "tests/testbed/engine_image.py"), "push"], timeout=3600)
    assert rc == 0, out[-3000:]
    for replica in ("inventories/testbed-fleet-a", "inventories/testbed-fleet-b"):
        rc, out = playbook("molecule/shared/dgx_os.yml", replica)
        assert rc == 0, out[-3000:]
    fleet_standins.router_wheelhouse()
    FLEET_DIR.mkdir(parents=True, exist_ok=True)
    if not KEY_FILE.exists():
        KEY_FILE.write_text(os.urandom(24).hex() + "\n")
        KEY_FILE.chmod(0o600)
    # A pair deployed earlier on node-0 and node-1 leaves its worker on node-1, outside the replicas' inventories.
    node_exec(1, "docker rm -f spark-serve-rank1 >/dev/null 2>&1; true")
    stop_router = fleet_standins.router_service_standin()
    rc, out, took = fleet_run()
    print(f"\n[site.yml fleet, first run] {took:.0f} s")
    assert rc == 0, out[-8000:]
    yield {"key": KEY_FILE.read_text().strip(), "first_run": out}
    node_exec(fleet_standins.ROUTER_NODE, stop_router)
    # The replicas' engines on node-0 and node-1 would pass for a pair to the next module: stopped.
    for index in (0, 1):
        node_exec(index, "docker rm -f spark-serve-rank0 >/dev/null 2>&1; true")


def test_the_router_serves_both_replicas_behind_the_key_and_its_admin_api_answers_only_the_controller(fleet):
    assert members() == sorted(REPLICAS.values())
    body = {"model": "tiny-llama", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
    statuses = {}
    for label, key in (("no key", None), ("wrong key", "sk-wrong-key-0000"), ("key", fleet["key"])):
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
        request = urllib.request.Request(f"{ROUTER}/v1/chat/completions", json.dumps(body).encode(), headers)
        try:
            with urllib.request.urlopen(request, timeout=60, context=ssl.create_default_context(cafile=CA)) as r:
                statuses[label] = r.status
        except urllib.error.HTTPError as err:
            statuses[label] = err.code
    assert statuses == {"no key": 401, "wrong key": 401, "key": 200}, statuses
    the_admin_api_takes_the_controllers_key_and_each_heads_own_url_only(fleet["key"])
    # The router's argv (its unit; the process renames itself) holds no key, and it listens on loopback only.
    _, unit = node_exec(fleet_standins.ROUTER_NODE, f"cat {fleet_standins.UNIT}")
    assert fleet["key"] not in unit and "--host 127.0.0.1 --port 30000" in unit, unit
    _, listening = node_exec(fleet_standins.ROUTER_NODE, "ss -Htlnp")
    bound = [line.split()[3] for line in listening.splitlines() if fleet_standins.ROUTER_PROCESS in line]
    assert sorted(bound) == ["127.0.0.1:29000", "127.0.0.1:30000"], listening


def the_admin_api_takes_the_controllers_key_and_each_heads_own_url_only(users_key):
    """The router's admin API needs its own credential, never the users' key. From replica a's head (its watchdog's
    place) with the credential the deploy gave it: its own URL out and back in, 200; replica b's URL or a plain http
    URL, 403; no credential or the users' key, 401. The LAN's services host is refused even with the admin key."""
    admin_key = ADMIN_KEY_FILE.read_text().strip()
    _, credential = node_exec(
        0, "stat -c '%a %U' /etc/spark-serve/router-credential; cat /etc/spark-serve/router-credential"
    )
    mode, credential = credential.strip().split("\n")
    assert mode == "600 root" and credential == member_credential(admin_key, REPLICAS["a"]), mode
    curl = "curl -s -o /dev/null -w '%{http_code}' -m 60 --cacert /tmp/fleet-ca.pem"
    asked = {
        ("head", "own url out", credential): f"-X POST '{ROUTER}/remove_worker?url={REPLICAS['a']}'",
        ("head", "own url back", credential): f"-X POST '{ROUTER}/add_worker?url={REPLICAS['a']}'",
        ("head", "other url out", credential): f"-X POST '{ROUTER}/remove_worker?url={REPLICAS['b']}'",
        ("head", "http url in", credential): f"-X POST '{ROUTER}/add_worker?url=http://{NET}.10:8000'",
        ("head", "list", None): f"'{ROUTER}/list_workers'",
        ("head", "list", users_key): f"'{ROUTER}/list_workers'",
        ("lan", "list", admin_key): f"'{ROUTER}/list_workers'",
    }
    containers = {"head": f"spark-serve-tb{INSTANCE}-node-0", "lan": f"spark-serve-tb{INSTANCE}-services"}
    for container in containers.values():
        run(["docker", "exec", "-i", container, "sh", "-c", "cat > /tmp/fleet-ca.pem"], input=CA.read_text())
    statuses = {}
    for (where, what, key), request in asked.items():
        header = f"-H 'Authorization: Bearer {key}' " if key else ""
        _, status = run(["docker", "exec", containers[where], "sh", "-c", f"{curl} {header}{request}"])
        label = {None: "none", credential: "own credential", users_key: "users' key", admin_key: "admin key"}[key]
        statuses[f"{where} {what} ({label})"] = status
    print(f"\n[router admin API] {statuses}")
    assert statuses == {
        "head own url out (own credential)": "200",
        "head own url back (own credential)": "200",
        "head other url out (own credential)": "403",
        "head http url in (own credential)": "403",
        "head list (none)": "401",
        "head list (users' key)": "401",
        "lan list (admin key)": "403",
    }, statuses
    assert members() == sorted(REPLICAS.values())


def test_fleet_status_shows_the_routers_view_beside_each_replicas_ranks(fleet):
    rc, out = playbook("playbooks/status.yml", FLEET)
    assert rc == 0, out[-4000:]
    view = out.split("Show the router's view beside each replica", 1)[1]
    assert "/health 200, routes to 2 replica(s)" in view, view
    for name, url in REPLICAS.items():
        assert f"{name} ({url}): in rotation" in view, view
    assert view.count("all 1 rank(s) alive; head /health 200") == 2, view


def test_the_benchmark_measures_the_fleet_through_its_router(fleet):
    words = json.dumps({"spark_serve_bench_input_words": [200, 400], "spark_serve_bench_max_tokens": 8})
    rc, out = playbook("playbooks/benchmark.yml", FLEET, "-e", words)
    assert rc == 0, out[-4000:]
    result = json.loads(sorted((FLEET_DIR / "controller" / "bench").glob("bench-*.json"))[-1].read_text())
    assert result["url"] == ROUTER and [row["input_words"] for row in result["rows"]] == [200, 400], result


def test_each_session_stays_on_one_replica_and_hits_its_prefix_cache(fleet):
    """consistent_hash on X-Session-ID: a session's second turn finds its first turn in that replica's cache."""
    hits = {}
    for session in [f"affinity-{n}" for n in range(6)]:
        messages = [{"role": "user", "content": " ".join(f"word{session}{i}" for i in range(64))}]
        stream_chat(ROUTER, fleet["key"], CA, session, messages)
        messages += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "and then?"}]
        hits[session] = stream_chat(ROUTER, fleet["key"], CA, session, messages).cached_tokens
    print(f"\n[affinity] cached prompt tokens of each session's second turn: {hits}")
    assert all(cached >= 16 for cached in hits.values()), hits


def test_a_restarted_router_takes_its_members_back(fleet):
    started = time.monotonic()
    node_exec(fleet_standins.ROUTER_NODE, f"pkill -x '{fleet_standins.ROUTER_PROCESS}'; true")
    back = None
    for _ in range(60):
        time.sleep(1)
        try:
            if members() == sorted(REPLICAS.values()):
                back = time.monotonic() - started
                break
        except (AssertionError, OSError, ValueError):
            continue
    print(f"\n[router restart] both members back after {back} s")
    assert back is not None, "the restarted router did not take its members back within 60 s"


def test_a_rolling_update_under_session_load_fails_no_request(fleet):
    """Both replicas restart with a changed profile (the deploy stage: `--tags deploy` reaches every replica's
    run), one at a time; the sessions never see a failure."""
    before_ids = {index: replica_identity(index) for index in (0, 1)}
    # A changed argv restarts each replica.
    changed = {"engine": {"max_num_seqs": 6}}
    overrides = {"spark_fleet_replica_vars": {"spark_serve_profile_overrides": changed}}
    # Three agents each sending a turn every half second or so: on 2 shared cores a heavier load would slow the
    # restarted replica's own gate past its TTFT bound (on Sparks every replica has its own GPU).
    with SessionLoad(ROUTER, fleet["key"], CA, sessions=3, pause_s=0.5) as load:
        time.sleep(20)  # the load's own baseline: TTFT before the rollout
        rollout_start = time.monotonic()
        rc, out, took = fleet_run("--tags", "deploy", "-e", json.dumps(overrides))
        rollout_end = time.monotonic()
        time.sleep(5)
    before = load.between(0, rollout_start)
    during = load.between(rollout_start, rollout_end)
    failed = [s for s in load.sent if s.error]
    p95_before = p95([s.ttft_s for s in before if s.ttft_s])
    p95_during = p95([s.ttft_s for s in during if s.ttft_s])
    print(
        f"\n[rolling update] {took:.0f} s; {len(load.sent)} requests ({len(during)} during), {len(failed)} failed; "
        f"p95 TTFT before {p95_before:.3f} s, during {p95_during:.3f} s ({p95_during / p95_before:.1f}x)"
    )
    assert rc == 0, out[-8000:]
    assert not failed, failed[:5]
    assert len(during) >= 20, len(during)
    after_ids = {index: replica_identity(index) for index in (0, 1)}
    assert all(after_ids[i] and after_ids[i] != before_ids[i] for i in (0, 1)), (before_ids, after_ids)
    assert members() == sorted(REPLICAS.values())
    for index in (0, 1):
        _, cmd = node_exec(index, "docker inspect -f '{{json .Config.Cmd}}' spark-serve-rank0")
        argv = json.loads(cmd)
        assert argv[argv.index("--max-num-seqs") + 1] == "6", argv


def seconds_until(condition, timeout_s):
    started = time.monotonic()
    for _ in range(int(timeout_s * 2)):
        with contextlib.suppress(AssertionError, OSError, ValueError):
            if condition():
                return round(time.monotonic() - started, 1)
        time.sleep(0.5)
    return None


def routing_lines():
    """How many routing decisions the router has logged so far (the stand-in keeps its log)."""
    _, out = node_exec(fleet_standins.ROUTER_NODE, f"grep -c 'x-session-id' {fleet_standins.STANDIN_LOG}")
    return int(out.strip() or 0)


def routed(first, last):
    """{session: [replica URL, ...]} of the router's logged decisions first..last (consistent hash logs each)."""
    _, out = node_exec(fleet_standins.ROUTER_NODE, f"grep 'x-session-id' {fleet_standins.STANDIN_LOG}")
    decisions = {}
    for line in out.splitlines()[first:last]:
        found = re.search(r"x-session-id:(\S+?)' -> worker='([^']+)'", line)
        if found:
            decisions.setdefault(found.group(1), []).append(found.group(2))
    return decisions


def test_a_frozen_replica_leaves_the_router_in_seconds_and_returns_after_its_restart(fleet):
    """Replica a's engine core frozen under session load (its /health stays 200, so the router's own check never
    notices): its watchdog takes it out of the router before stopping it, restarts it, and puts it back. Only the
    requests in flight on it fail; only its sessions move (the router's own log of each decision tells)."""
    stop, pid = sf.fresh_watchdog(), None
    try:
        with SessionLoad(ROUTER, fleet["key"], CA, sessions=6) as load:
            time.sleep(10)  # every session has turns behind it, on its replica's cache
            pid = sf.engine_core_pid()
            before = routing_lines()
            node_exec(0, f"kill -STOP {pid}")
            frozen = time.monotonic()
            removed_s = seconds_until(lambda: REPLICAS["a"] not in members(), 60)
            removed = routing_lines()
            sf.wait_for_the_watchdog(True, 600)
            during = routing_lines()
            back_s = seconds_until(lambda: REPLICAS["a"] in members(), 60)
            back_s = None if back_s is None else round(time.monotonic() - frozen, 1)
            time.sleep(5)
    finally:
        node_exec(0, stop)
        node_exec(0, f"kill -CONT {pid} 2>/dev/null; true" if pid else "true")
    events = sf.watchdog_events()
    trip = next(e for e in events if e["event"] == "service unhealthy")
    ready = next((e for e in events if e["event"] == "auto-restart ready"), {})
    out_at = frozen + (removed_s or 0)
    failed = [s for s in load.sent if s.error]
    sessions = {f"s{n}" for n in range(6)}  # SessionLoad's names
    home = {session: workers[-1] for session, workers in routed(0, before).items() if session in sessions}
    outage = routed(removed, during)  # from a's removal until its restart is done (it is back by then)
    on_a = sorted(session for session, replica in home.items() if replica == REPLICAS["a"])
    moved = sorted(session for session in on_a if REPLICAS["b"] in outage.get(session, []))
    kept = sorted(s for s in home if s not in on_a and set(outage.get(s, [])) == {REPLICAS["b"]})
    print(
        f"\n[failover] out of the router {removed_s} s after the freeze, back {back_s} s after it; "
        f"{len(load.sent)} requests, {len(failed)} failed; sessions on a {on_a}, moved to b {len(moved)}/{len(home)}, "
        f"kept on b {len(kept)}/{len(home) - len(on_a)}; events {[e['event'] for e in events]}"
    )
    assert trip.get("router_remove") == "done" and ready.get("router_add") == "done", events
    assert removed_s is not None and removed_s <= sf.watchdog_bound_s(), removed_s  # replica a's head is node-0
    assert back_s is not None, "replica a was not put back after its restart"
    assert len(home) == 6 and 0 < len(on_a) < 6, home
    assert moved == on_a and len(kept) == 6 - len(on_a), (home, outage)
    # The only failures: the one request each of a's sessions had in flight when it froze.
    assert all(s.started < out_at for s in failed), failed
    assert sorted(s.session for s in failed) == sorted({s.session for s in failed}) and {
        s.session for s in failed
    } <= set(on_a), (failed, on_a)
