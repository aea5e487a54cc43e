"""module_utils/fleet_rollout.py and library/vllm_fleet.py: the rolling update's order of effects with
fakes, and the module against a fake router and fake replicas on loopback with a stand-in ansible-playbook."""

import json
import os
import stat
import sys
from pathlib import Path
from unittest import mock
from urllib.parse import parse_qs, urlparse

import pytest
from ansible.module_utils.door_keys import member_credential
from ansible.module_utils.fleet_rollout import FleetOps, in_flight, replica_problems, roll_out
from ansible.modules import vllm_fleet

from tests.fake_vllm import LoopbackServer
from tests.module_harness import run_module


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def fake_ops(held=None, deploy=None, serving=None, members=("u-a", "u-b")):
    """FleetOps recording every effect in `ops.calls`; held/deploy/serving: {replica name: value or list}."""
    clock, calls, routed = Clock(), [], list(members)
    held = {name: list(values) for name, values in (held or {}).items()}

    def remove(url):
        calls.append(("remove", url))
        routed.remove(url)

    def add(url):
        calls.append(("add", url))
        routed.append(url)

    def held_by(replica):
        values = held.get(replica["name"], [0])
        return values.pop(0) if len(values) > 1 else values[0]

    def deploy_one(replica):
        calls.append(("deploy", replica["name"]))
        return (deploy or {}).get(replica["name"], (True, ""))

    ops = FleetOps(
        members=lambda: list(routed),
        remove=remove,
        add=add,
        held=held_by,
        serving=lambda replica: (serving or {}).get(replica["name"], True),
        deploy=deploy_one,
        clock=clock,
        sleep=clock.sleep,
    )
    return ops, calls


REPLICAS = [{"name": "a", "inventory": "inv-a", "url": "u-a"}, {"name": "b", "inventory": "inv-b", "url": "u-b"}]


def test_each_replica_leaves_the_router_drains_deploys_and_comes_back_in_order():
    ops, calls = fake_ops(held={"a": [3, 2, 0]})
    steps, problem = roll_out(ops, REPLICAS, drain_timeout_s=60)
    assert problem == ""
    assert calls == [("remove", "u-a"), ("deploy", "a"), ("add", "u-a"), ("remove", "u-b"), ("deploy", "b"),
                     ("add", "u-b")]  # fmt: skip
    assert (steps[0].drained_s, steps[0].left_in_flight, steps[1].drained_s) == (2.0, 0, 0.0)
    assert all(step.deployed and step.back_in_rotation for step in steps)


def test_a_drain_is_bounded_and_says_how_many_requests_were_left():
    ops, _ = fake_ops(held={"a": [5]})
    steps, problem = roll_out(ops, REPLICAS[:1], drain_timeout_s=10)
    assert problem == "" and (steps[0].drained_s, steps[0].left_in_flight) == (10.0, 5)


def test_a_replica_not_in_rotation_is_deployed_without_a_drain_and_added():
    ops, calls = fake_ops(members=())
    roll_out(ops, REPLICAS, drain_timeout_s=60)
    assert ("remove", "u-a") not in calls and calls[:2] == [("deploy", "a"), ("add", "u-a")]


def test_a_rejected_replica_that_serves_its_old_deployment_goes_back_and_the_rollout_stops():
    ops, calls = fake_ops(deploy={"a": (False, "its site.yml failed at 'Gate': decode 1 tok/s < 5")})
    steps, problem = roll_out(ops, REPLICAS, drain_timeout_s=60)
    assert calls == [("remove", "u-a"), ("deploy", "a"), ("add", "u-a")]
    assert problem == (
        "replica a: its site.yml failed at 'Gate': decode 1 tok/s < 5 (it serves its previous deployment and is back "
        "in rotation); the rollout stopped there; not touched: b"
    )
    assert len(steps) == 1 and steps[0].back_in_rotation


def test_a_replica_that_does_not_serve_after_its_run_stays_out_of_the_router():
    ops, calls = fake_ops(deploy={"b": (False, "its site.yml failed")}, serving={"b": False})
    steps, problem = roll_out(ops, REPLICAS, drain_timeout_s=60)
    assert calls[-2:] == [("remove", "u-b"), ("deploy", "b")] and "u-b" not in ops.members()
    assert problem == (
        "replica b: its site.yml failed (it does not serve and stays out of the router); the rollout stopped there"
    )
    assert [step.back_in_rotation for step in steps] == [True, False]


def test_a_replica_list_with_problems_is_refused_with_all_of_them(tmp_path):
    (tmp_path / "inventories" / "a").mkdir(parents=True)
    replicas = [
        {"name": "a", "inventory": "inventories/a", "url": "https://a:8443"},
        {"name": "a", "inventory": "inventories/missing", "url": "a:8443"},
        {"inventory": "inventories/a", "url": "https://c:8443"},
        "b",
    ]
    problems = replica_problems(replicas, str(tmp_path))
    assert problems == [
        "replica a: inventory='inventories/missing' is no inventory folder under " + str(tmp_path) + " (rule: each "
        "replica is an inventory of its own, with its own profile and records)",
        "replica a: url='a:8443' is not its door (rule: http(s)://<head>:<port>, as the router reaches it)",
        "spark_fleet_replicas[2]: {'inventory': 'inventories/a', 'url': 'https://c:8443'} has no name (rule: each "
        "replica has name, inventory and url)",
        "spark_fleet_replicas[3]: 'b' has no name (rule: each replica has name, inventory and url)",
        "replica names a repeat (rule: each replica has its own name and log)",
    ]
    assert replica_problems(replicas[:1], str(tmp_path)) == []


def test_in_flight_counts_running_and_waiting_requests():
    assert in_flight({"vllm:num_requests_running": 2.0, "vllm:num_requests_waiting": 1.0}) == 3
    assert in_flight({"vllm:num_requests_running": 0.0}) == 0
    assert in_flight({"vllm:request_success_total": 4.0}) is None


class FakeRouter:
    """vllm-router's admin API: list_workers, add_worker, remove_worker."""

    def __init__(self, urls):
        self.urls, self.calls = list(urls), []
        self.server = LoopbackServer(self.answer)

    def answer(self, request):
        parsed = urlparse(request.path)
        url = parse_qs(parsed.query).get("url", [""])[0]
        self.calls.append((parsed.path, url))
        self.authorization = request.headers.get("Authorization")
        if parsed.path == "/add_worker" and url in self.urls:
            return 400, {}, [f"Worker {url} already exists".encode()]
        if parsed.path == "/add_worker":
            self.urls.append(url)
        elif parsed.path == "/remove_worker":
            self.urls.remove(url)
        elif parsed.path == "/get_loads":
            return 200, {}, [json.dumps({"workers": [{"worker": u, "load": 1} for u in self.urls]}).encode()]
        return 200, {}, [json.dumps({"urls": self.urls}).encode()]


def fake_replica(running):
    """A replica's door: /health 200, /metrics with `running` requests."""
    metrics = f"vllm:num_requests_running {running}\nvllm:num_requests_waiting 0\n".encode()
    return LoopbackServer(lambda request: (200, {}, [metrics if request.path == "/metrics" else b"ok"]))


@pytest.fixture()
def stand_in_playbook(tmp_path):
    """An ansible-playbook that records its argv and fails for inventories named in FAIL_FOR."""
    script = tmp_path / "ansible-playbook"
    script.write_text(
        f"#!{sys.executable}\nimport json, sys\nprint('argv', json.dumps(sys.argv[1:]))\n"
        "if 'status.yml' in sys.argv[1] and 'fail' not in sys.argv[3]:\n"
        '    print(\'    "msg": "all 1 rank(s) alive; head /health 200"\')\n'
        "if '--check' in sys.argv:\n"
        "    print('node-0 : ok=40   changed=' + ('2' if 'inv-a' in sys.argv else '0') + '    unreachable=0')\n"
        "if 'fail' in sys.argv[3]:\n"
        "    print('TASK [vllm_release : Gate the deployment] ***')\n"
        '    print(\'fatal: [localhost]: FAILED! => {"msg": "hot TTFT 3 s > 1 s"}\')\n'
        "    sys.exit(2)\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def run_fleet(tmp_path, playbook, replicas, router, **args):
    """vllm_fleet over `replicas` ({name: (inventory folder, fake door)}) through `router`, with `playbook` standing
    in for ansible-playbook."""
    for inventory, _ in replicas.values():
        (tmp_path / inventory).mkdir(exist_ok=True)
    listed = [{"name": name, "inventory": inventory, "url": door.url} for name, (inventory, door) in replicas.items()]
    params = dict(replicas=listed, router_url=router.server.url, ca_file="", project_dir=str(tmp_path),
                  log_dir=str(tmp_path / "logs"), **args)  # fmt: skip
    with mock.patch.object(vllm_fleet, "ansible_playbook", return_value=str(playbook)):
        return run_module(vllm_fleet, params)


def test_the_module_rolls_out_through_a_router_and_keeps_each_run_log(tmp_path, stand_in_playbook):
    a, b = fake_replica(0), fake_replica(0)
    router = FakeRouter([a.url, b.url])
    replicas = {"a": ("inv-a", a), "b": ("inv-b", b)}
    result = run_fleet(tmp_path, stand_in_playbook, replicas, router, tags=["deploy"], replica_extra_vars={"x": 1})
    assert not result["failed"], result
    assert [path for path, _ in router.calls if path != "/list_workers"] == ["/remove_worker", "/add_worker"] * 2
    assert result["members"] == [a.url, b.url] and [r["name"] for r in result["replicas"]] == ["a", "b"]
    argv = json.loads((tmp_path / "logs" / "a.log").read_text().split("argv ", 1)[1].splitlines()[0])
    assert argv[:5] == ["site.yml", "-i", "inv-a", "--tags", "deploy"] and argv[5] == "-e", argv
    assert argv[-2:] == ["-e", json.dumps({"vllm_service_router_member": a.url})], argv
    for server in (a, b, router.server):
        server.close()


def test_with_an_admin_key_the_router_hears_it_and_each_replica_run_gets_its_own_credential(
    tmp_path, stand_in_playbook
):
    """The admin key goes to the router's door only (never to a replica's); each replica's run gets a 0600 file
    with the credential its head may name its own URL with (module_utils/door_keys.member_credential)."""
    a = fake_replica(0)
    router = FakeRouter([a.url])
    admin_key = tmp_path / "router-admin-key"
    admin_key.write_text("admin-0123456789abcdef0123\n")
    credentials = []
    real_run_site = vllm_fleet.run_site

    def run_site(module, replica, args, name, timeout_s):
        path = json.loads(args[-1])["vllm_service_router_credential_file"]
        credentials.append((oct(os.stat(path).st_mode & 0o777), Path(path).read_text(encoding="utf-8").strip()))
        return real_run_site(module, replica, args, name, timeout_s)

    with mock.patch.object(vllm_fleet, "run_site", run_site):
        result = run_fleet(tmp_path, stand_in_playbook, {"a": ("inv-a", a)}, router, admin_key_file=str(admin_key))
    assert not result["failed"], result
    assert router.authorization == "Bearer admin-0123456789abcdef0123"
    assert credentials == [("0o600", member_credential("admin-0123456789abcdef0123", a.url))]
    assert "admin-0123456789abcdef0123" not in json.dumps(result)
    for server in (a, router.server):
        server.close()


def test_the_module_stops_at_a_failed_replica_naming_its_failed_task(tmp_path, stand_in_playbook):
    a, b = fake_replica(0), fake_replica(0)
    router = FakeRouter([a.url, b.url])
    result = run_fleet(tmp_path, stand_in_playbook, {"a": ("inv-fail", a), "b": ("inv-b", b)}, router)
    log = tmp_path / "logs" / "a.log"
    assert result["failed"] and result["msg"] == (
        f"replica a: its site.yml failed at 'vllm_release : Gate the deployment': hot TTFT 3 s > 1 s (log {log}) "
        "(it serves its previous deployment and is back in rotation); the rollout stopped there; not touched: b"
    )
    assert sorted(router.urls) == sorted([a.url, b.url])
    for server in (a, b, router.server):
        server.close()


def test_the_module_refuses_a_bad_replica_list_before_running_anything(tmp_path, stand_in_playbook):
    args = dict(replicas=[{"name": "a", "inventory": "nowhere", "url": "https://a:8443"}], mode="validate",
                project_dir=str(tmp_path), log_dir=str(tmp_path / "logs"))  # fmt: skip
    with mock.patch.object(vllm_fleet, "ansible_playbook", return_value=str(stand_in_playbook)):
        result = run_module(vllm_fleet, args)
    assert (
        result["failed"] and result["msg"].endswith("; nothing was changed") and "inventory='nowhere'" in result["msg"]
    )
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize("certificates", [True, False], ids=["router-follows", "validate-alone"])
def test_validation_issues_every_replicas_door_certificate_only_when_the_router_follows(
    tmp_path, stand_in_playbook, certificates
):
    """Before the router takes its copy of the fleet's CA, every replica's certificate is issued on the controller
    (the CA then permits every door's names); a validation alone (--tags validate) issues none."""
    for inventory in ("inv-a", "inv-b"):
        (tmp_path / inventory).mkdir()
    replicas = [{"name": n, "inventory": f"inv-{n}", "url": f"https://127.0.0.1:84{i}3"} for i, n in enumerate("ab")]
    args = dict(replicas=replicas, mode="validate", project_dir=str(tmp_path), log_dir=str(tmp_path / "logs"),
                certificates=certificates)  # fmt: skip
    with mock.patch.object(vllm_fleet, "ansible_playbook", return_value=str(stand_in_playbook)):
        result = run_module(vllm_fleet, args)
    assert not result["failed"], result
    assert result["heads"] == {"a": "127.0.0.1", "b": "127.0.0.1"}
    issued = sorted(path.name for path in (tmp_path / "logs").glob("*-certificate.log"))
    assert issued == (["a-certificate.log", "b-certificate.log"] if certificates else [])
    for log in issued:
        argv = json.loads((tmp_path / "logs" / log).read_text().split("argv ", 1)[1].splitlines()[0])
        assert argv == ["playbooks/door-certificate.yml", "-i", f"inv-{log[0]}"], argv


def test_status_reports_the_routers_view_beside_every_replica_and_fails_naming_the_unwell(tmp_path, stand_in_playbook):
    a, b = fake_replica(2), fake_replica(0)
    router = FakeRouter([a.url])
    result = run_fleet(tmp_path, stand_in_playbook, {"a": ("inv-a", a), "b": ("inv-fail", b)}, router, mode="status")
    assert result["failed"] and result["msg"] == "not well or out of rotation: b"
    assert result["router"] == {"health": 200, "members": [a.url], "loads": {a.url: 1}}
    first, second = result["status"]
    assert (first["in_rotation"], first["in_flight"], first["ok"]) == (True, 2, True)
    assert first["summary"] == "all 1 rank(s) alive; head /health 200"
    assert (second["in_rotation"], second["ok"]) == (False, False) and "Gate the deployment" in second["summary"]
    assert router.calls == [("/health", ""), ("/list_workers", ""), ("/get_loads", "")]
    for server in (a, b, router.server):
        server.close()


def test_a_replica_its_watchdog_already_put_back_counts_as_back_in_rotation(tmp_path, stand_in_playbook):
    """The router answers 400 'already exists' when someone added the replica meanwhile: in rotation, as wanted."""
    a = fake_replica(0)
    router = FakeRouter([])
    (tmp_path / "inv-a").mkdir()
    replicas = [{"name": "a", "inventory": "inv-a", "url": a.url}]
    args = dict(replicas=replicas, router_url=router.server.url, ca_file="", project_dir=str(tmp_path),
                log_dir=str(tmp_path / "logs"))  # fmt: skip

    def deploy_and_get_added(*_args, **_kwargs):
        router.urls.append(a.url)  # the replica's watchdog adds it back during its run
        return str(stand_in_playbook)

    with mock.patch.object(vllm_fleet, "ansible_playbook", side_effect=deploy_and_get_added):
        result = run_module(vllm_fleet, args)
    assert not result["failed"] and result["replicas"][0]["back_in_rotation"], result
    assert router.calls[-2:] == [("/add_worker", a.url), ("/list_workers", "")] and router.urls == [a.url]
    for server in (a, router.server):
        server.close()


def test_check_mode_previews_every_replica_and_never_calls_the_router(tmp_path, stand_in_playbook):
    a, b, c = fake_replica(0), fake_replica(0), fake_replica(0)
    router = FakeRouter([a.url, b.url, c.url])
    replicas = {"a": ("inv-a", a), "b": ("inv-b", b), "c": ("inv-fail", c)}
    with mock.patch.object(vllm_fleet, "ansible_playbook", return_value=str(stand_in_playbook)):
        listed = [{"name": n, "inventory": i, "url": door.url} for n, (i, door) in replicas.items()]
        for inventory, _ in replicas.values():
            (tmp_path / inventory).mkdir()
        params = dict(replicas=listed, router_url=router.server.url, ca_file="", project_dir=str(tmp_path),
                      log_dir=str(tmp_path / "logs"), tags=["deploy"])  # fmt: skip
        result = run_module(vllm_fleet, params, check_mode=True)
    assert router.calls == [] and result["changed"], result
    assert [(r["name"], r["would_change"], r["ok"]) for r in result["preview"]] == [
        ("a", 2, True), ("b", 0, True), ("c", 0, False)
    ]  # fmt: skip
    assert result["failed"] and result["msg"].startswith("check mode: replica c: its site.yml failed at 'vllm_release")
    argv = json.loads((tmp_path / "logs" / "b-check.log").read_text().split("argv ", 1)[1].splitlines()[0])
    assert argv[:7] == ["site.yml", "-i", "inv-b", "--check", "--diff", "--tags", "deploy"], argv
    assert argv[-2:] == ["-e", json.dumps({"vllm_service_router_member": b.url})], argv
    for server in (a, b, c, router.server):
        server.close()
