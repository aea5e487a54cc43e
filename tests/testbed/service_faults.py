"""The served pair on the test bed and the faults the staged start must survive, shared by
tests/testbed/test_service.py (which asserts) and tests/bench/start_faults_bench.py (which prints figures).

Every scenario runs the project's real playbooks against the real vLLM CPU engine and returns what it measured.
"""

import ast
import calendar
import concurrent.futures
import json
import re
import shlex
import socket
import ssl
import subprocess
import tarfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

from tests.runner import ansible_playbook_argv
from tests.testbed.helpers import ENV_BASE, INSTANCE, ROOT, node_container, node_exec, playbook, run

# The head's front door (roles/front_door): TLS on 8443 with the CA the first deploy made on this controller.
HEAD = f"https://10.253.{16 * int(INSTANCE)}.10:8443"
DOOR_CA = ROOT / ".testbed" / str(INSTANCE) / "spark-serve" / "front-door" / "ca.pem"
# The key the engine behind the door checks, made by the first deploy (roles/vllm_service/tasks/render.yml).
ENGINE_KEY = ROOT / ".testbed" / str(INSTANCE) / "spark-serve" / "engine-key"
MODEL = "tiny-llama"
PAIR = "inventories/testbed-pair"
# The engine's own bound when a rank never arrives: the CPU build's gloo default and NCCL's
# (docs/engine-facts.md section 5).
GLOO_TIMEOUT_S, NCCL_TIMEOUT_S = 1801, 601
IMAGE_VLLM = "/opt/vllm/lib/python3.11/site-packages/vllm"  # where the test-bed image installs vLLM
TESTBED_TIMEOUT_S = 300  # the testbed profile's distributed_timeout_seconds: the engine's own bound here
FAST_NETDEV, FAST_MTU, MASTER_PORT = "enp1s0f1np1", 9000, 29501


def door():
    """A TLS context that trusts only the test bed's front-door CA."""
    return ssl.create_default_context(cafile=DOOR_CA)


def post(path, body, timeout=120, api_key=None):
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(HEAD + path, data=json.dumps(body).encode(), headers=headers)
    return urllib.request.urlopen(request, timeout=timeout, context=door())


# What another node on the LAN may ask the head's front door: method, path, body.
DOOR_CHAT = {"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
DOOR_PATHS = [
    ("POST", "/v1/chat/completions", DOOR_CHAT),
    ("POST", "/v1/completions", {"model": MODEL, "max_tokens": 2, "prompt": "hi"}),
    ("GET", "/v1/models", None),
    ("POST", "/invocations", DOOR_CHAT),
    ("POST", "/tokenize", {"model": MODEL, "prompt": "hi"}),
    ("GET", "/metrics", None),
    ("GET", "/health", None),
]


def door_from_node(index, key):
    """{(path, 'no key'|'wrong key'|'key'): HTTP status} of every DOOR_PATHS request sent from test node `index`
    with curl, verifying the door with its CA; plus ('plain http', port) for plain HTTP to the door and to vLLM's
    own port (000: the connection was refused)."""
    node_exec(index, f"cat > /tmp/door-ca.pem <<'EOF'\n{DOOR_CA.read_text()}EOF")
    host = HEAD.split("//")[1].split(":")[0]
    statuses = {}
    for method, path, body in DOOR_PATHS:
        for label, sent in (("no key", None), ("wrong key", "sk-wrong"), ("key", key)):
            auth = f"-H 'Authorization: Bearer {sent}'" if sent else ""
            data = f"-H 'Content-Type: application/json' -d '{json.dumps(body)}'" if body else ""
            _, out = node_exec(
                index,
                f"curl -s -o /dev/null -w '%{{http_code}}' -m 30 --cacert /tmp/door-ca.pem -X {method} {auth} {data} "
                f"{HEAD}{path}",
            )
            statuses[(path, label)] = out.strip()
    for port in (8443, 8000):
        _, out = node_exec(index, f"curl -s -o /dev/null -w '%{{http_code}}' -m 10 http://{host}:{port}/v1/models")
        statuses[("plain http", port)] = out.strip()
    return statuses


def door_metrics_from_the_services_host():
    """HTTP status of the door's /metrics for a LAN host that is neither the controller nor a monitoring host."""
    services = f"spark-serve-tb{INSTANCE}-services"
    run(["docker", "exec", "-i", services, "sh", "-c", "cat > /tmp/door-ca.pem"], input=DOOR_CA.read_text())
    curl = "curl -s -o /dev/null -w '%{http_code}' -m 30 --cacert /tmp/door-ca.pem"
    return run(["docker", "exec", services, "sh", "-c", f"{curl} {HEAD}/metrics"])[1].strip()


# The head on the LAN (where the controller and other hosts reach it) and on the fast link (where the ranks do).
HEAD_LAN = HEAD.split("//")[1].split(":")[0]
HEAD_FAST = f"10.253.{16 * int(INSTANCE) + 1}.10"


def fabric_ports(index=0):
    """The TCP ports node `index` listens on beyond loopback in the ranges roles/fabric_firewall closes: the master
    port and the kernel's ephemeral range (where NCCL, Gloo and vLLM's message queues listen)."""
    _, port_range = node_exec(index, "cat /proc/sys/net/ipv4/ip_local_port_range")
    low, high = map(int, port_range.split())
    _, listening = node_exec(index, "ss -Htln")
    ports = set()
    for line in listening.splitlines():
        address, port = line.split()[3].rsplit(":", 1)
        if not address.startswith(("127.", "[::1]", "[::ffff:127.")) and (
            int(port) == MASTER_PORT or low <= int(port) <= high
        ):
            ports.add(int(port))
    return sorted(ports)


AS_NOBODY = "setpriv --reuid=65534 --regid=65534 --clear-groups"  # an unprivileged local user on a node


def engine_listeners(index):
    """(address, port) of every TCP listener of node `index` in the ranges roles/fabric_firewall closes (the master
    port and the ephemeral range), loopback ones included; a wildcard listener is reached at both the node's
    loopback and its fast-link address."""
    _, port_range = node_exec(index, "cat /proc/sys/net/ipv4/ip_local_port_range")
    low, high = map(int, port_range.split())
    _, listening = node_exec(index, "ss -Htln")
    fast = f"10.253.{16 * int(INSTANCE) + 1}.{10 + index}"
    found = set()
    for line in listening.splitlines():
        address, port = line.split()[3].rsplit(":", 1)
        if int(port) != MASTER_PORT and not low <= int(port) <= high:
            continue
        address = address.strip("[]").removeprefix("::ffff:")
        targets = ["127.0.0.1", fast] if address in ("0.0.0.0", "*", "::") else [address]
        found.update((target, int(port)) for target in targets if ":" not in target)
    return sorted(found)


def answering_from_node(index, address, ports, timeout_s=3, as_user=""):
    """The ports of `address` that accept a TCP connection from node `index` within timeout_s (all tried at once),
    as root or with `as_user` (a setpriv prefix, e.g. AS_NOBODY)."""
    probes = " ".join(
        f"({as_user} timeout {timeout_s} bash -c 'exec 3<>/dev/tcp/{address}/{port}' 2>/dev/null && echo {port}) &"
        for port in ports
    )
    _, out = node_exec(index, f"{probes} wait")
    return sorted(int(port) for port in out.split())


def answering_from_controller(address, ports, timeout_s=3):
    """The ports of `address` that accept a TCP connection from this controller within timeout_s (all tried at
    once: a dropped port costs the whole timeout)."""

    def answers(port):
        try:
            socket.create_connection((address, port), timeout=timeout_s).close()
            return True
        except OSError:
            return False

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(ports))) as pool:
        return [port for port, answered in zip(ports, pool.map(answers, ports), strict=True) if answered]


def chat(content, max_tokens=8, **body):
    return {"model": MODEL, "max_tokens": max_tokens, "messages": [{"role": "user", "content": content}], **body}


def health():
    try:
        with urllib.request.urlopen(HEAD + "/health", timeout=5, context=door()) as response:
            return response.status
    except (OSError, urllib.error.HTTPError):
        return None


def engine_containers(index):
    rc, out = node_exec(index, "docker ps -q --filter name=spark-serve-rank")
    return out.split() if rc == 0 else []


def container_identity(index):
    rc, out = node_exec(index, f"docker inspect -f '{{{{.Id}}}} {{{{.State.StartedAt}}}}' spark-serve-rank{index}")
    return out.strip() if rc == 0 else None


def recap(out):
    """{host: {'ok': n, 'changed': n, ...}} from a playbook's PLAY RECAP."""
    hosts = {}
    for host, counts in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", out, re.M):
        hosts[host] = {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", counts)}
    return hosts


def changed_count(out):
    """Tasks reported changed over every host of a playbook run."""
    return sum(counts.get("changed", 0) for counts in recap(out).values())


def printed_msg(out, task):
    """The `msg` a debug task printed in a playbook's output (its result as JSON after `=>`), or None."""
    found = re.search(rf"^TASK \[{re.escape(task)}\].*?\n.*?=> (\{{.*?\n\}})\n", out, re.M | re.S)
    return json.loads(found.group(1))["msg"] if found else None


def deploy(*extra, inventory=PAIR, timeout=1800):
    """site.yml's deploy stage (validate + staged start): (rc, output)."""
    return playbook("site.yml", inventory, "--tags", "deploy", *extra, timeout=timeout)


def door_run(*extra, inventory=PAIR):
    """playbooks/door.yml: the head's door alone, with the inventory's keys and tenants: (rc, output)."""
    return playbook("playbooks/door.yml", inventory, *extra, timeout=300)


class Stream:
    """One streaming chat through the door: chunks received, whether it ended with [DONE], how, and when."""

    def __init__(self, max_tokens, api_key=None):
        self.max_tokens, self.api_key = max_tokens, api_key
        self.tokens, self.done, self.error, self.finish_reason, self.ended = 0, False, None, None, None

    def run(self):
        body = chat("count", max_tokens=self.max_tokens, stream=True, ignore_eos=True)
        try:
            with post("/v1/chat/completions", body, timeout=60, api_key=self.api_key) as response:
                for line in response:
                    if line.startswith(b"data: {"):
                        self.tokens += 1
                        choices = json.loads(line[6:]).get("choices") or []  # error chunks have none
                        self.finish_reason = (
                            choices[0].get("finish_reason") if choices else None
                        ) or self.finish_reason
                    self.done |= line.strip() == b"data: [DONE]"
        except (OSError, urllib.error.URLError, ValueError) as error:
            self.error = repr(error)
        finally:
            self.ended = time.monotonic()

    def whole(self):
        """Served to its end: every token asked for, then [DONE]."""
        return self.done and self.error is None and self.finish_reason == "length"


def start_streams(streams, timeout_s=60):
    """Start every stream in its own thread and wait, bounded, until each has received a chunk."""
    for stream in streams:
        stream.thread = threading.Thread(target=stream.run)
        stream.thread.start()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not all(s.tokens or s.ended for s in streams):
        time.sleep(0.2)
    assert all(s.tokens for s in streams), f"streams never started: {[vars(s) for s in streams]}"


def join_streams(streams, timeout_s=120):
    for stream in streams:
        stream.thread.join(timeout=timeout_s)
    assert not any(s.thread.is_alive() for s in streams), "a streaming client hung"


def last_load_s():
    """Seconds from start to ready of the pair's latest recorded start (its deployment record's ready_s)."""
    records = sorted((ROOT / ".testbed" / INSTANCE / "spark-serve" / "records").glob("*.json"))
    starts = [json.loads(path.read_text()) for path in records]
    times = [r["ready_s"] for r in starts if r.get("inventory") == "testbed-pair" and r.get("ready_s")]
    assert times, "no recorded start of the pair to compare with"
    return float(times[-1])


def ensure_serving():
    """Redeploy the unchanged profile unless the pair already serves (after a fault left it stopped)."""
    if health() == 200 and all(engine_containers(i) for i in range(2)):
        return
    rc, out = deploy()
    assert rc == 0, out[-6000:]


def noop_rerun(*extra):
    before = [container_identity(i) for i in range(2)]
    started = time.monotonic()
    rc, out = deploy(*extra)
    return {
        "rc": rc,
        "out": out,
        "seconds": time.monotonic() - started,
        "changed": changed_count(out),
        "restarts": sum(a != b for a, b in zip(before, [container_identity(i) for i in range(2)], strict=True)),
    }


def watched_deploy(extra_vars, on_line, timeout=900, inventory=PAIR):
    """Run the deploy stage, calling on_line(line) for every output line; returns (rc, output, {event: time})."""
    return watched_run(
        ["-i", inventory, "site.yml", "--tags", "deploy", "-e", json.dumps(extra_vars)], on_line, timeout
    )


def watched_run(args, on_line, timeout=900):
    """Run ansible-playbook with `args`, calling on_line(line, marks) for every output line; returns (rc, output,
    marks), where marks holds 'detected' (a staged start's DETECTED line) and 'ended' (time.time())."""
    proc = subprocess.Popen(
        ansible_playbook_argv(*args),
        cwd=ROOT,
        env=ENV_BASE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines, marks = [], {}
    deadline = time.monotonic() + timeout
    for line in proc.stdout:
        lines.append(line)
        if "DETECTED" in line:
            marks.setdefault("detected", time.time())
        on_line(line, marks)
        if time.monotonic() > deadline:
            proc.kill()
            break
    proc.wait(timeout=120)
    marks["ended"] = time.time()
    return proc.returncode, "".join(lines), marks


def end_state(nodes=2, model=MODEL, worker=1):
    """What a failed start must leave: no engine container on any node, the cache, the collected logs."""
    cache = f"/var/lib/spark-serve/huggingface/hub/models--spark-serve--{model}/snapshots"
    rc, snapshot = node_exec(0, f"ls {cache}")
    return {
        "running": [container for index in range(nodes) for container in engine_containers(index)],
        "cache_intact": rc == 0 and bool(snapshot.strip()),
        "worker_logs": sorted((ROOT / ".spark-serve" / "logs").glob(f"*/rank{worker}-node-{worker}.log")),
    }


# A changed engine argument, so the start really happens (the unchanged profile would restart nothing), and no
# automatic rollback: the fault tests that do not prove the rollback leave the ranks stopped, as a user who turned it
# off would find them (a rollback is a whole start).
CHANGED = {"engine": {"max_num_seqs": 3}}
CHANGED_NO_ROLLBACK = {"spark_serve_profile_overrides": {**CHANGED, "acceptance": {"rollback": False}}}
# A change of its own that restarts every rank and passes the gate (no other test deploys it).
RESTARTED = {"spark_serve_profile_overrides": {"engine": {"max_num_seqs": 5}}}


# A line of the start watch's looks at the ranks ("[vllm]    11 s  rank 0 (node-0): ... | rank 1 (node-1): ..."), not
# one it prints before the ranks start.
LOOK = re.compile(r"^\[vllm\] +\d+ s  ")


def kill_worker_during_start(worker=1, inventory=PAIR, nodes=2, model=MODEL):
    """(a) A worker is killed while the head waits for it / loads."""

    def kill_worker_once_started(line, marks):
        if "killed" not in marks and LOOK.match(line) and f"rank {worker} (node-{worker})" in line:
            node_exec(worker, f"docker kill spark-serve-rank{worker}")
            marks["killed"] = time.time()

    rc, out, marks = watched_deploy(CHANGED_NO_ROLLBACK, kill_worker_once_started, inventory=inventory)
    seconds = marks["detected"] - marks["killed"] if {"detected", "killed"} <= marks.keys() else None
    state = end_state(nodes, model, worker)
    return {"rc": rc, "out": out, "seconds": seconds, "engine_timeout_s": GLOO_TIMEOUT_S, **ended(marks), **state}


def ended(marks):
    """Seconds from the DETECTED line to the playbook's end."""
    return {"ended_s": marks["ended"] - marks["detected"] if "detected" in marks else None}


def first_look(line):
    """The start watch's first look at the ranks: both containers started, the head not yet serving."""
    return bool(LOOK.match(line)) and "rank 1 (node-1)" in line


def fault_during_start(index, fault, undo, extra_vars=CHANGED_NO_ROLLBACK, when=first_look):
    """Run `fault` on node `index` at the first playbook line `when` accepts (by default the start watch's first
    look), undo it after the run. Seconds from the fault to the DETECTED line, and from that line to the playbook's
    end."""

    def inject(line, marks):
        if "fault" not in marks and when(line):
            marks["fault_rc"] = node_exec(index, fault)
            marks["fault"] = time.time()

    try:
        rc, out, marks = watched_deploy(extra_vars, inject)
    finally:
        undone = node_exec(index, undo)
    assert marks.get("fault_rc", (1, "never injected"))[0] == 0, marks.get("fault_rc")
    assert undone[0] == 0, undone
    seconds = marks["detected"] - marks["fault"] if {"detected", "fault"} <= marks.keys() else None
    return {
        "rc": rc,
        "out": out,
        "seconds": seconds,
        "engine_timeout_s": TESTBED_TIMEOUT_S,
        **ended(marks),
        **end_state(),
    }


def link_down_during_start():
    """(f) The worker's fast link goes down mid-start (the preflight's DF ping had passed)."""
    return fault_during_start(1, f"ip link set dev {FAST_NETDEV} down", f"ip link set dev {FAST_NETDEV} up")


def mtu_lowered_during_start():
    """(g) The MTU drops to 1500 on one end mid-start (jumbo frames no longer pass)."""
    return fault_during_start(
        1, f"ip link set dev {FAST_NETDEV} mtu 1500", f"ip link set dev {FAST_NETDEV} mtu {FAST_MTU}"
    )


def master_port_dropped_during_start():
    """(h) A firewall rule inside the head drops its master port on the fast link mid-start."""
    rule = f"INPUT -i {FAST_NETDEV} -p tcp --dport {MASTER_PORT} -j DROP"
    return fault_during_start(0, f"iptables -I {rule}", f"iptables -D {rule}")


def container_signal(index, signal):
    """Shell for node `index`: send `signal` to every process of its engine container; fails when it has none."""
    pids = f"$(docker top spark-serve-rank{index} -eo pid 2>/dev/null | tail -n +2)"
    return f'pids={pids}; [ -n "$pids" ] && kill -{signal} $pids'


def rank_frozen_during_start(index):
    """(j) Every process of one rank's container stopped (SIGSTOP) mid-start: the container stays "running", its
    log goes silent, and the other rank waits for it."""
    thaw = container_signal(index, "CONT") + "; true"  # the failed start removed the container: nothing to thaw
    return fault_during_start(index, container_signal(index, "STOP"), thaw)


# The worker process of rank 1 once it has imported vLLM and titled itself (VLLM::Worker, then VLLM::Worker_TP1, as
# it sets up the distributed groups): every other process of the rank (the server, the resource tracker) keeps running.
WORKER_PID = (
    "for p in $(docker top spark-serve-rank1 -eo pid 2>/dev/null | tail -n +2); do "
    "case \"$(tr '\\0' ' ' </proc/$p/cmdline 2>/dev/null)\" in VLLM::Worker*) echo $p;; esac; done"
)


def worker_process_frozen_during_start(extra_vars=None):
    """(k) Only rank 1's worker process stopped (SIGSTOP) as soon as it has titled itself, before it sets up its
    groups (as a worker hung in its device or group set-up): its server process and rank 0 sleep waiting for it, so
    no rank is frozen whole. The watch begins when the staged start does, since a forked worker titles itself and
    meets the head within a second of the head's import, and only a worker of the rank's new container counts (the
    old one is being stopped). By default the profile's rollback stays on."""
    container = "$(docker inspect -f '{{.Id}}' spark-serve-rank1 2>/dev/null)"
    freeze = (
        f"old={container}; for i in $(seq 300); do now={container}; "
        f'if [ -n "$now" ] && [ "$now" != "$old" ]; then p=$({WORKER_PID}); [ -n "$p" ] && kill -STOP $p && exit 0; '
        "fi; sleep 0.2; done; exit 1"
    )
    thaw = container_signal(1, "CONT") + "; true"
    overrides = extra_vars or {"spark_serve_profile_overrides": CHANGED}
    return fault_during_start(1, freeze, thaw, overrides, when=lambda line: "[vllm] staged start of" in line)


def image_source(relative):
    """Text of a file of the pinned engine image (read with `docker run cat` on node 0; test set-up only)."""
    image = json.loads((ROOT / ".testbed" / INSTANCE / "engine-image.json").read_text())
    rc, out = node_exec(
        0, f"docker run --rm --network none --entrypoint cat {image['name']}@{image['digest']} {IMAGE_VLLM}/{relative}"
    )
    assert rc == 0, out
    return out


def without_method(source, class_name, preferred):
    """`source` with one method of `class_name` deleted (the preferred one when the class defines it): the
    overlay that was written against an older engine file (seed 000: no `validate_environ`)."""
    tree = ast.parse(source)
    cls = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == class_name)
    methods = [node for node in cls.body if isinstance(node, ast.FunctionDef)]
    victim = next((m for m in methods if m.name == preferred), methods[-1])
    first = min([victim.lineno] + [d.lineno for d in victim.decorator_list])
    lines = source.splitlines(keepends=True)
    return "".join(lines[: first - 1] + lines[victim.end_lineno :]), f"{class_name}.{victim.name}"


def worker_cannot_start(folder):
    """(b) The worker dies at import: an overlay (valid names, so the overlay check passes) that raises on import,
    mounted on the worker only, as when an image and its overlays diverge on one node."""
    relative = "platforms/interface.py"
    broken = folder / "interface_raises.py"
    broken.write_text(
        image_source(relative) + "\nraise ImportError('spark-serve fault test: overlay breaks the import')\n"
    )
    overlay = [{"src": str(broken), "dest": f"{IMAGE_VLLM}/{relative}"}]
    started = time.time()
    rc, out, marks = watched_deploy(
        {
            "vllm_service_overlays": "{{ " + json.dumps(overlay) + " if inventory_hostname == 'node-1' else [] }}",
            "spark_serve_profile_overrides": {"acceptance": {"rollback": False}},
        },
        lambda line, marks: None,
    )
    # The worker's own exit time, from the node's Docker event log.
    _, events = node_exec(
        1,
        f"docker events --since {int(started)} --until {int(time.time()) + 1} "
        "--filter container=spark-serve-rank1 --filter event=die --format '{{.TimeNano}}'",
    )
    died = [int(stamp) / 1e9 for stamp in events.split() if stamp.isdigit()]
    seconds = marks["detected"] - died[0] if died and "detected" in marks else None
    return {"rc": rc, "out": out, "seconds": seconds, "engine_timeout_s": GLOO_TIMEOUT_S, **ended(marks), **end_state()}


def node_short_of_memory(index=1, available_kib=1_000_000):
    """A node whose available memory is below what the profile takes: its /proc/meminfo says so (a file
    bind-mounted over it inside the test node, as lxcfs gives containers their own), and the start must refuse it
    naming the node and both numbers before any rank starts."""
    node_exec(
        index,
        f"printf 'MemTotal:        8000000 kB\\nMemAvailable:   {available_kib} kB\\n' > /tmp/short-meminfo && "
        "mount --bind /tmp/short-meminfo /proc/meminfo",
    )
    started = time.monotonic()
    try:
        rc, out = deploy("-e", json.dumps({**CHANGED_NO_ROLLBACK, "vllm_service_memory_wait_s": 1}))
    finally:
        node_exec(index, "umount /proc/meminfo")
    return {"rc": rc, "out": out, "seconds": time.monotonic() - started, **end_state()}


def wrong_master_address():
    """(b) A master address nobody holds: refused before anything changes (seconds = the whole refused run)."""
    nobody = f"10.253.{16 * int(INSTANCE) + 1}.99"
    before = [container_identity(i) for i in range(2)]
    started = time.monotonic()
    rc, out = deploy("-e", f"vllm_service_master_addr={nobody}")
    return {
        "rc": rc,
        "out": out,
        "seconds": time.monotonic() - started,
        "address": nobody,
        "untouched": [container_identity(i) for i in range(2)] == before,
    }


def kill_worker_after_ready():
    """(d) The worker dies after ready: the head's /health stays 200, status.yml must say so."""
    node_exec(1, "docker kill spark-serve-rank1")
    killed = time.monotonic()
    health_after_kill = health()
    rc, out = playbook("playbooks/status.yml")
    return {
        "rc": rc,
        "out": out,
        "seconds": time.monotonic() - killed,
        "health": health_after_kill,
        "engine_timeout_s": None,
    }


WATCHDOG_RUN = "/usr/bin/python3 /usr/local/lib/spark-serve/spark-serve-watchdog.py /etc/spark-serve/watchdog.json"
WATCHDOG_EVENTS = "/var/lib/spark-serve/records/watchdog-events.jsonl"
WATCHDOG_STATE = "/var/lib/spark-serve/watchdog/state.json"
WATCHDOG_INTERVAL_S = 3  # inventories/testbed-*/group_vars/spark_nodes/vllm_service.yml


def watchdog_timer_standin(runs=200):
    """What spark-serve-watchdog.timer does on a Spark, for test-bed nodes that run no systemd: the service's own
    command every interval (the inventory's vllm_service_watchdog_interval_s) on the head, `runs` times at most.
    Returns the command that stops it."""
    loop = f"for i in $(seq {runs}); do {WATCHDOG_RUN}; sleep {WATCHDOG_INTERVAL_S}; done"
    rc, out = node_exec(0, f"nohup sh -c '{loop}' >/tmp/spark-serve-watchdog.out 2>&1 </dev/null & echo $!")
    assert rc == 0, out
    return f"kill {out.strip()}; true"


def watchdog_bound_s():
    """The longest the head's watchdog may take to act by its own configuration: the failed looks it acts after plus
    the look a fault first shows in, each an interval apart and as long as its slowest probe, with 5 s more per look
    for a busy machine's Python, Docker and SSH. The tests print the figure itself (about 10 s on an idle bed)."""
    _, config = node_exec(0, "cat /etc/spark-serve/watchdog.json")
    config = json.loads(config)
    per_look = WATCHDOG_INTERVAL_S + max(config["generation_timeout_s"], config["progress_timeout_s"]) + 5
    return (config["failed_looks"] + 1) * per_look


def watchdog_events():
    _, out = node_exec(0, f"cat {WATCHDOG_EVENTS} 2>/dev/null")
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def wait_for_the_watchdog(auto_restart, timeout_s):
    """Until the watchdog has finished acting: the head stopped after its event line (SIGTERM, up to 10 s), or,
    with auto_restart, the restart's own event (ready or failed) after a whole load."""
    deadline = time.monotonic() + timeout_s
    for _ in range(int(timeout_s)):
        events = [e["event"] for e in watchdog_events()]
        if auto_restart and any(e.startswith("auto-restart") for e in events):
            return
        if not auto_restart and "service unhealthy" in events and not engine_containers(0):
            return
        if time.monotonic() > deadline:
            break
        time.sleep(1)
    raise AssertionError(f"the watchdog did not finish acting within {timeout_s} s: {watchdog_events()}")


def kill_worker_under_the_watchdog(while_dead=lambda: None, timeout_s=60, restart_timeout_s=600):
    """(i) The worker dies after ready under the head's watchdog: its timer looks once at the healthy pair, pauses
    for the kill and while_dead() (e.g. status.yml: on busy cores a playbook outlasts the watchdog's automatic
    restart, which would bring the worker back under it), then looks on. Returns /health right after the kill, what
    while_dead() returned, the seconds from the timer's return until clients see /health fail, without anyone
    running a playbook, and with the profile's auto_restart the seconds until a chat answers again."""
    _, config = node_exec(0, "cat /etc/spark-serve/watchdog.json")
    auto_restart = json.loads(config)["auto_restart"]
    node_exec(0, fresh_watchdog())  # one look at the healthy pair: the head seen serving, no load grace left
    node_exec(1, "docker kill spark-serve-rank1")
    health_after_kill = health()
    during = while_dead()
    stop = watchdog_timer_standin()
    try:
        watched, seconds = time.monotonic(), None
        while time.monotonic() - watched < timeout_s:
            if health() != 200:
                seconds = round(time.monotonic() - watched, 1)
                break
            time.sleep(0.5)
        wait_for_the_watchdog(auto_restart, restart_timeout_s)
        serving_again_s = None
        if auto_restart and health() == 200:
            with post("/v1/chat/completions", chat("back?", max_tokens=2)) as response:
                serving_again_s = round(time.monotonic() - watched, 1) if json.load(response)["choices"] else None
    finally:
        node_exec(0, stop)
    return {
        "seconds": seconds,
        "serving_again_s": serving_again_s,
        "auto_restart": auto_restart,
        "health_after_kill": health_after_kill,
        "while_dead": during,
        "events": watchdog_events(),
        "running": engine_containers(0) + engine_containers(1),
        "rc": 0,
        "engine_timeout_s": None,
    }


def wait_for_event(name, timeout_s):
    """Until the watchdog has recorded an event called `name`; the events then, or None after timeout_s."""
    deadline = time.monotonic() + timeout_s
    for _ in range(int(timeout_s) + 1):
        events = watchdog_events()
        if any(e["event"] == name for e in events) or time.monotonic() > deadline:
            return events if any(e["event"] == name for e in events) else None
        time.sleep(1)
    return None


def node_booted(index, timeout_s=90):
    """Until test-bed node `index` answers over SSH's daemon and Docker after its start; True once it does."""
    probe = "for i in $(seq 150); do pgrep -x sshd >/dev/null && docker info >/dev/null 2>&1 && exit 0; sleep 0.5; done"
    deadline = time.monotonic() + timeout_s
    for _ in range(int(timeout_s)):
        rc, _ = node_exec(index, f"{probe}; exit 1", timeout=timeout_s)
        if rc == 0:
            return True
        if time.monotonic() > deadline:
            break
        time.sleep(1)  # `docker exec` refused while the container itself starts
    return False


def fast_link(index):
    """(name, MTU, IPv4 address with prefix) of the node's fast-link netdev, or None when it is not there."""
    rc, out = node_exec(index, f"ip -o -4 addr show dev {FAST_NETDEV}; cat /sys/class/net/{FAST_NETDEV}/mtu")
    found = re.search(r"inet (\S+) .*\n(\d+)$", out.strip(), re.S)
    return (FAST_NETDEV, int(found.group(2)), found.group(1)) if rc == 0 and found else None


def power_cut(serving_timeout_s):
    """Both nodes lose power; the head boots first and the worker a little later (it waits for the head's watchdog
    to find it absent). Nobody runs a playbook: what systemd does on a Spark at boot is the entrypoint's boot
    (tests/testbed/node-entrypoint.sh) plus the watchdog timer's stand-in started once the head is up. Returns the
    seconds from the cut until a chat answers through the door, the watchdog's events and what each node has."""
    node_exec(0, f"rm -f {WATCHDOG_EVENTS}")
    cut = time.monotonic()
    docker = ["docker", "stop", "--time", "10"]
    subprocess.run([*docker, node_container(0), node_container(1)], check=True, capture_output=True, timeout=60)
    subprocess.run(["docker", "start", node_container(0)], check=True, capture_output=True, timeout=60)
    assert node_booted(0), "the head did not boot"
    stop = watchdog_timer_standin(runs=400)
    try:
        waited = wait_for_event("auto-restart waits", 60)
        subprocess.run(["docker", "start", node_container(1)], check=True, capture_output=True, timeout=60)
        assert node_booted(1), "the worker did not boot"
        serving_s = None
        while time.monotonic() - cut < serving_timeout_s and serving_s is None:
            if wait_for_event("auto-restart failed", 0):
                break
            try:
                with post("/v1/chat/completions", chat("back after the power cut?", max_tokens=2), timeout=30) as r:
                    answer = json.load(r)["choices"]
                serving_s = round(time.monotonic() - cut, 1) if answer else None
            except OSError:  # the door refuses or answers 502 while the ranks load
                time.sleep(1)
        wait_for_event("auto-restart ready", 60)  # written after the restart's own warm-up and generation
    finally:
        node_exec(0, stop)
    return {
        "serving_s": serving_s,
        "waited": waited,
        "events": watchdog_events(),
        "running": engine_containers(0) + engine_containers(1),
        "fast_links": [fast_link(i) for i in range(2)],
    }


def watchdog_looks(count, timeout_s=60):
    """Until the watchdog has finished `count` more looks (each one rewrites its state file), bounded in time."""
    seen, deadline = set(), time.monotonic() + timeout_s
    for _ in range(int(timeout_s / 0.3) + 1):
        _, stamp = node_exec(0, f"stat -c %y {WATCHDOG_STATE} 2>/dev/null")
        seen.add(stamp.strip())
        if len(seen) > count or time.monotonic() > deadline:
            return len(seen) > count
        time.sleep(0.3)
    return False


def fresh_watchdog():
    """Forget earlier events and state, start the timer's stand-in and wait for its first finished look (a look at
    the healthy service writes the state file). Returns the command that stops the stand-in."""
    node_exec(0, f"rm -f {WATCHDOG_EVENTS} {WATCHDOG_STATE}")
    stop = watchdog_timer_standin()
    # A look starts Python, asks Docker, pings and probes: on two busy cores (CI, both shards) it took over 20 s.
    wait = f"for i in $(seq 450); do test -s {WATCHDOG_STATE} && exit 0; sleep 0.2; done; exit 1"
    rc, _ = node_exec(0, f"timeout 90 sh -c {shlex.quote(wait)}", timeout=120)
    assert rc == 0, "the watchdog's first look never finished within 90 s"
    return stop


def one_dropped_ping_under_the_watchdog(timeout_s=30):
    """Node 1 drops the DF pings of the head's fast link until one watchdog look has failed, then answers again: the
    watchdog's events afterwards (it must note the failed look and act on nothing)."""
    rule = f"INPUT -i {FAST_NETDEV} -p icmp --icmp-type echo-request -j DROP"
    stop = fresh_watchdog()
    try:
        rc, out = node_exec(1, f"iptables -I {rule}")
        assert rc == 0, out
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not any(e["event"] == "look failed" for e in watchdog_events()):
            time.sleep(0.2)
        node_exec(1, f"iptables -D {rule}")
        assert watchdog_looks(2), "the watchdog stopped looking"
    finally:
        node_exec(1, f"iptables -D {rule} 2>/dev/null; true")
        node_exec(0, stop)
    return {"events": watchdog_events(), "health": health()}


class Load:
    """A bounded client load on the head: `clients` threads, each sending long generations (ignore_eos, so every one
    runs its max_tokens) back to back until `seconds` have passed. Counts answered and failed requests."""

    def __init__(self, clients, max_tokens, seconds):
        self.clients, self.max_tokens, self.seconds = clients, max_tokens, seconds
        self.answered, self.failures, self.threads = 0, [], []
        self.lock = threading.Lock()

    def client(self, index, deadline):
        for turn in range(10_000):
            if time.monotonic() > deadline:
                return
            body = chat(f"client {index} turn {turn}: tell a long story", max_tokens=self.max_tokens, ignore_eos=True)
            try:
                with post("/v1/chat/completions", body, timeout=600) as response:
                    json.load(response)
                with self.lock:
                    self.answered += 1
            except (OSError, ValueError) as error:
                with self.lock:
                    self.failures.append(f"client {index}: {error}")
                time.sleep(0.5)  # a dead service refuses at once: do not spin

    def start(self):
        deadline = time.monotonic() + self.seconds
        self.threads = [
            threading.Thread(target=self.client, args=(i, deadline), daemon=True) for i in range(self.clients)
        ]
        for thread in self.threads:
            thread.start()
        return self

    def join(self, timeout_s):
        for thread in self.threads:
            thread.join(timeout=timeout_s)
        return {"answered": self.answered, "failed": len(self.failures), "failures": self.failures[:5]}


def metrics_value(name):
    """One of the head's /metrics values summed over its label sets (None when /metrics does not answer)."""
    try:
        with urllib.request.urlopen(HEAD + "/metrics", timeout=10, context=door()) as response:
            text = response.read().decode()
    except OSError:
        return None
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.split("{")[0] == name)


def busy_service_under_the_watchdog(seconds=75, clients=8, max_tokens=800):
    """Every slot busy (4 on the pair) with long generations and as many requests queued, for `seconds`, while the
    watchdog looks every few seconds: what it did, and what the clients saw."""
    stop = fresh_watchdog()
    before = container_identity(0)
    try:
        load = Load(clients, max_tokens, seconds).start()
        peak = 0
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            running = metrics_value("vllm:num_requests_running") or 0
            waiting = metrics_value("vllm:num_requests_waiting") or 0
            peak = max(peak, running + waiting)
            time.sleep(5)
        clients_saw = load.join(timeout_s=900)
    finally:
        node_exec(0, stop)
    return {
        "events": watchdog_events(),
        "same_head": container_identity(0) == before,
        "peak_pending": peak,
        **clients_saw,
    }


def engine_core_pid():
    """The head's engine-core process (vLLM names it VLLM::EngineCore), as the node sees it."""
    rc, out = node_exec(0, "docker top spark-serve-rank0 -eo pid,args | grep -F 'VLLM::EngineCore' | grep -v grep")
    assert rc == 0 and out.split(), f"no engine core process in the head container: {out}"
    return out.split()[0]


def engine_core_frozen_under_the_watchdog(clients=0, timeout_s=60, restart_timeout_s=600, on_trip=None):
    """The head's engine core frozen (SIGSTOP) after ready, idle or with `clients` generating: seconds from the
    freeze to the watchdog's trip, what on_trip(frozen_at) returned (called at the trip, while the restart runs),
    and what the watchdog did after (the testbed profile's auto_restart)."""
    stop = fresh_watchdog()
    load = Load(clients, 400, timeout_s).start() if clients else None
    try:
        if load:
            for _ in range(100):  # until the load runs: requests in the engine
                if (metrics_value("vllm:num_requests_running") or 0) > 0:
                    break
                time.sleep(0.2)
        pid = engine_core_pid()
        rc, out = node_exec(0, f"kill -STOP {pid}")
        assert rc == 0, out
        frozen, frozen_at = time.monotonic(), time.time()
        seconds = None
        while time.monotonic() - frozen < timeout_s:
            if any(e["event"] == "service unhealthy" for e in watchdog_events()):
                seconds = round(time.monotonic() - frozen, 1)
                break
            time.sleep(0.5)
        tripped = on_trip(frozen_at) if on_trip and seconds is not None else None
        wait_for_the_watchdog(True, restart_timeout_s)
    finally:
        node_exec(0, stop)
        node_exec(0, f"kill -CONT {pid} 2>/dev/null; true")
    load = load.join(timeout_s=120) if load else None
    events = watchdog_events()
    return {"seconds": seconds, "frozen_at": frozen_at, "events": events, "load": load, "on_trip": tripped}


class Run:
    """A playbook run in the background whose output lines are kept with the time each arrived."""

    def __init__(self, *args, inventory=PAIR):
        command = ansible_playbook_argv("-i", inventory, *args)
        self.proc = subprocess.Popen(
            command, cwd=ROOT, env=ENV_BASE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.lines = []
        self.reader = threading.Thread(target=self.read, daemon=True)
        self.reader.start()

    def read(self):
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line))

    def first(self, text):
        """When the first line holding `text` arrived, or None."""
        return next((at for at, line in self.lines if text in line), None)

    def wait_for(self, text, timeout_s):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.proc.poll() is None:
            if self.first(text) is not None:
                return True
            time.sleep(0.2)
        return self.first(text) is not None

    def finish(self, timeout_s=1800):
        self.proc.wait(timeout=timeout_s)
        self.reader.join(timeout=30)
        return self.proc.returncode, "".join(line for _, line in self.lines)


LOCK_TASK = "Take the inventory's lock on the head"
REFUSED = "another change of this service is running"


def two_deploys_at_once():
    """A deploy that really starts the ranks (a changed argument), and a second one started while the first holds
    the lock: the second's seconds from its lock task to its refusal, both outputs."""
    first = Run(
        "site.yml",
        "--tags",
        "deploy",
        "-e",
        json.dumps({"spark_serve_profile_overrides": {"engine": {"max_num_seqs": 3}}}),
    )
    assert first.wait_for("[vllm] staged start", 900), "the first deploy never reached its start"
    second = Run("site.yml", "--tags", "deploy")
    second_rc, second_out = second.finish(900)
    first_rc, first_out = first.finish()
    took, refused = second.first(LOCK_TASK), second.first(REFUSED)
    return {
        "first_pid": first.proc.pid,
        "first": (first_rc, first_out),
        "second": (second_rc, second_out),
        "refused_s": round(refused - took, 1) if took and refused else None,
    }


def deploy_during_an_auto_restart():
    """The worker killed under the watchdog; once the watchdog holds the lock and restarts the pair, a deploy of the
    shipped profile: it must stop the restart, take the lock, start the pair and leave no trip behind. The pair first
    runs a changed argument (deployed here unless it already runs), so that the deploy really starts the ranks."""
    _, cmd = node_exec(0, "docker inspect -f '{{json .Config.Cmd}}' spark-serve-rank0")
    argv = json.loads(cmd) if cmd.strip().startswith("[") else []
    if "--max-num-seqs" not in argv or argv[argv.index("--max-num-seqs") + 1] != "3":
        rc, out = deploy("-e", json.dumps({"spark_serve_profile_overrides": {"engine": {"max_num_seqs": 3}}}))
        assert rc == 0, out[-4000:]
    stop = fresh_watchdog()
    try:
        node_exec(1, "docker kill spark-serve-rank1")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any(e["event"] == "service unhealthy" for e in watchdog_events()):
            time.sleep(0.5)
        _, lock = node_exec(0, "cat /var/lib/spark-serve/lock.json")
        rc, out = Run("site.yml", "--tags", "deploy").finish(1800)
        assert watchdog_looks(2), "the watchdog stopped looking after the deploy"
    finally:
        node_exec(0, stop)
    _, state = node_exec(0, f"cat {WATCHDOG_STATE} 2>/dev/null")
    _, lock_after = node_exec(0, "cat /var/lib/spark-serve/lock.json 2>/dev/null")
    return {
        "rc": rc,
        "out": out,
        "lock_during": json.loads(lock) if lock.strip().startswith("{") else None,
        "lock_after": lock_after.strip(),
        "state": json.loads(state) if state.strip().startswith("{") else {},
        "events": watchdog_events(),
        "health": health(),
    }


def where_the_key_shows(secret):
    """Every place the API key must never appear, each mapped to whether it does."""
    found = {
        "controller process list": secret
        in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    }
    for index in range(2):
        for place, command in {
            "compose file": "cat /etc/spark-serve/compose.yaml",
            "process list": "ps -eo args",
            "engine log": f"docker logs spark-serve-rank{index} 2>&1",
            "container argv": f"docker inspect -f '{{{{json .Config.Cmd}}}} {{{{json .Args}}}}' "
            f"spark-serve-rank{index}",
        }.items():
            _, out = node_exec(index, command)
            found[f"node-{index} {place}"] = secret in out
    return found


MARKED = re.compile(r"^<from [^:>]+: [^>]+>$")  # a node fact validate cannot know (roce_network/tasks/engine_env.yml)


def running_view(index):
    """What rank `index`'s container runs, in the terms of a rank spec (docker inspect on its node)."""
    rc, out = node_exec(index, f"docker inspect spark-serve-rank{index}")
    assert rc == 0, out
    found = json.loads(out)[0]
    host = found["HostConfig"]
    return {
        "image": found["Config"]["Image"],
        "argv": found["Config"]["Cmd"],
        "env": dict(item.split("=", 1) for item in found["Config"]["Env"]),
        "mounts": sorted((m["Source"], m["Destination"], not m["RW"]) for m in found["Mounts"] if m["Type"] == "bind"),
        "restart": host["RestartPolicy"]["Name"],
        "ipc": host["IpcMode"],
        "cap_add": sorted(host.get("CapAdd") or []),
        "log": host["LogConfig"]["Config"],
        "config_hash": found["Config"]["Labels"].get("org.spark-serve.config-hash"),
    }


def spec_differences(spec, running):
    """(differences, marked): every field where validate's rank spec and the running container disagree, and the
    marked node facts with the value the node gave them (env values never printed: the key lives there)."""
    container = spec["container"]
    expected = {
        "image": spec["image"],
        "argv": spec["argv"],
        "mounts": sorted((m["src"], m["dest"], m["ro"]) for m in spec["mounts"]),
        "restart": container["restart"],
        "ipc": container["ipc"],
        "cap_add": sorted(container.get("cap_add") or []),
        "log": {"max-size": str(container["log_max_size"]), "max-file": str(container["log_max_files"])},
    }
    differences = [field for field, value in expected.items() if running[field] != value]
    env, marked = running["env"], []
    for key, value in spec["env"].items():
        if MARKED.match(value):
            marked.append(f"{key}={env.get(key)}")
            if key not in env or MARKED.match(env[key]):
                differences.append(f"env.{key}")
        elif env.get(key) != value:
            differences.append(f"env.{key}")
    if ("VLLM_API_KEY" in env) != bool(spec["env_file"]):
        differences.append("env_file")
    if not marked and running["config_hash"] != spec["config_hash"]:
        differences.append("config_hash")
    return differences, marked


def validated_vs_running(inventory, profile, nodes):
    """site.yml --tags validate (touches no node), then each rank's spec against its running container."""
    rc, out = playbook("site.yml", inventory, "--tags", "validate")
    assert rc == 0, out[-4000:]
    ranks = []
    for index in range(nodes):
        spec_file = ROOT / ".testbed" / INSTANCE / "spark-serve" / profile / f"rank{index}.spec.json"
        spec = json.loads(spec_file.read_text())
        differences, marked = spec_differences(spec, running_view(index))
        ranks.append({"rank": spec["rank"], "differences": differences, "marked": marked, "argv": len(spec["argv"])})
    return ranks


# roles/monitoring on the served pair (inventories/testbed-pair: Prometheus and Alertmanager on node-1, whose
# Alertmanager posts to the sink below on its loopback).
SINK_PORT, SINK_LOG = 9199, "/tmp/webhook-sink.jsonl"


def prometheus_url():
    return f"http://10.253.{int(INSTANCE) * 16}.11:9090"


def start_monitoring():
    """The webhook sink on node-1, then playbooks/monitoring.yml: (rc, output, seconds)."""
    # Into /root: `docker cp` writes the image's layer, under the node's /tmp tmpfs.
    rc, out = run(["docker", "cp", str(ROOT / "tests/testbed/webhook_sink.py"), f"{node_container(1)}:/root/"])
    assert rc == 0, out
    node_exec(1, f"pkill -f webhook_sink.py; rm -f {SINK_LOG}; true")
    sink = ["python3", "/root/webhook_sink.py", str(SINK_PORT), SINK_LOG]
    rc, out = run(["docker", "exec", "-d", node_container(1), *sink])
    assert rc == 0, out
    rc, out = node_exec(
        1, f"for i in $(seq 50); do curl -s -o /dev/null 127.0.0.1:{SINK_PORT} && exit 0; sleep 0.1; done; exit 1"
    )
    assert rc == 0, "the webhook sink does not answer"
    began = time.monotonic()
    rc, out = playbook("playbooks/monitoring.yml")
    return rc, out, round(time.monotonic() - began, 1)


def notifications():
    """Every alert the sink received: (received, status, alertname, labels) in arrival order."""
    _, out = node_exec(1, f"cat {SINK_LOG} 2>/dev/null; true")
    posts = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return [
        (post["received"], alert["status"], alert["labels"]["alertname"], alert["labels"])
        for post in posts
        for alert in post["body"]["alerts"]
    ]


def told_by_the_watchdog():
    """Every event line the head's watchdog gave its notification command (inventories/testbed-pair appends each to a
    file on node-0)."""
    _, out = node_exec(0, "cat /var/lib/spark-serve/notified.jsonl 2>/dev/null; true")
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def notified(alertname, since, timeout_s):
    """The first firing notification of `alertname` the sink received after the wall-clock time `since`, waiting
    until `since + timeout_s`; None when none came."""
    while True:
        found = [n for n in notifications() if n[0] >= since and n[1:3] == ("firing", alertname)]
        if found or time.time() > since + timeout_s:
            return found[0] if found else None
        time.sleep(1)


def prometheus(path):
    with urllib.request.urlopen(prometheus_url() + path, timeout=10) as answer:
        return json.load(answer)["data"]


def query(expr):
    """The instant vector of a PromQL expression on the test bed's Prometheus."""
    return prometheus("/api/v1/query?" + urllib.parse.urlencode({"query": expr}))["result"]


def alerts_since(began):
    """Alerts pending or firing now that became active at or after the wall-clock time `began`: [(name, state)]."""
    return [
        (alert["labels"]["alertname"], alert["state"])
        for alert in prometheus("/api/v1/alerts")["alerts"]
        if calendar.timegm(time.strptime(alert["activeAt"][:19], "%Y-%m-%dT%H:%M:%S")) >= int(began)
    ]


def bundle(*extra):
    """playbooks/bundle.yml on the pair: (rc, output, {member: bytes} of the bundle it wrote, names without the
    bundle's top folder)."""
    rc, out = playbook("playbooks/bundle.yml", PAIR, *extra)
    written = re.search(r"(/\S+/bundles/bundle-\S+\.tar\.gz): \d+ files", out)
    if rc != 0 or not written:
        return rc, out, {}
    with tarfile.open(written[1], "r:gz") as tar:
        found = {info.name.split("/", 1)[1]: tar.extractfile(info).read() for info in tar.getmembers()}
    return rc, out, found
