#!/usr/bin/python3
"""spark-serve watchdog: one look at a ready vLLM service from its head node, run every few seconds by a systemd
timer (spark-serve-watchdog.timer), installed by the vllm_service role.

Each look judges the service by its progress, never by how long one request takes: the head's engine container
runs, every worker answers DF pings over the fast link at the fabric's MTU, and then
- with requests running or waiting (the engine's /metrics), the engine's token counters must advance: stuck means
  work pending and no token progress for `progress_timeout_s`; a busy service is never probed with a generation
  that would queue behind its users' requests;
- idle, one tiny generation must answer within `generation_timeout_s` (/health stays 200 with a dead worker or a
  wedged engine core, and only a generation needs every rank). A generation that times out while the counters
  advanced meanwhile (a request arrived) is no failure.
It judges nothing while the Docker daemon does not answer, nor within `load_timeout_s` of the head container's start
until /health answers (a reboot or a daemon restart reloads the engine), and it acts only after `failed_looks`
consecutive failed looks about one start of the head, so one dropped ping or one slow answer never stops a service.
A start is the head container's `.State.StartedAt` (Docker's restart policy keeps the container and starts it anew):
a look counts as failed only when the head is, at its end, still the start it judged and the daemon answers (a 5xx
or a refused connection while Docker stops or restarts the engine says nothing of the next start), a new start
begins a new count, and the head is read once more before acting: a head restarted meanwhile is left alone.
On a problem it makes the service visibly unhealthy by stopping the head (its /health then fails for clients and
load balancers), prints one event line (the journal keeps it; printed even when the record folder cannot be
written) and appends it to the node's record folder. With the profile's `auto_restart`, it then restarts the whole
service in the deploy's order: every rank stopped, every rank's vLLM compile cache wiped (what a tripped engine
wrote there is never loaded again; without auto_restart the next deploy's start wipes it), the workers started (over
SSH with a key that may only run the node's spark-serve-rank-control), then the head; the service must answer the
profile's warm-up and a generation within the load time, else every rank is stopped again (the head's last log
lines are kept). A restart waits until
every worker answers (its SSH, its Docker daemon, its fast link at the fabric's MTU): after a power cut the head
finds its own engine down while a worker may still boot; each look tries again, and the wait is recorded once. It
acts once per fault and restarts at most `auto_restart_max` times between two deploys: the role resets its state
after the next start, and disarms it while a start runs; a look re-reads its configuration before it acts and stands
down when a deploy disarmed it meanwhile, and a trip recorded against an earlier head container is forgotten. In a
fleet (`router` set: docs/fleet.md) it takes the replica out of the router's rotation before it stops the head, so
that new requests go to the other replicas at once, and puts it back after a good automatic restart. After every
look and every recorded event it writes its verdicts, each rank container's state (the workers' read over the
restart path) and the count of each recorded event to `metrics_file` for the node exporter's textfile collector
(roles/monitoring alerts on them), and gives each recorded event to the inventory's `notify_command` on its stdin.
Standard library only.

    spark-serve-watchdog.py /etc/spark-serve/watchdog.json
    spark-serve-watchdog.py /etc/spark-serve/watchdog.json --peers   # the deploy's try of the restart path
"""

import datetime
import json
import os
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import inventory_lock  # the role installs module_utils/inventory_lock.py beside this script


def run(argv, timeout=30):
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as error:
        return 1, str(error)
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def head_status(config):
    """("running", StartedAt) when the head container runs, ("restarting", StartedAt) while its restart policy brings
    it back, ("down", StartedAt of its last start, None without a container) when it does not run, ("no daemon",
    None) when the Docker daemon does not answer (nothing to judge, and nothing the watchdog could stop)."""
    rc, out = run(["docker", "inspect", "-f", "{{.State.Status}} {{.State.StartedAt}}", config["container"]])
    status = out.split()
    if rc == 0 and len(status) == 2:
        return status[0] if status[0] in ("running", "restarting") else "down", status[1]
    return ("no daemon", None) if "docker daemon" in out.lower() else ("down", None)


def head_moved(config, head):
    """Why the head is no longer the (status, StartedAt) a look judged, or None when it still is: what a look saw
    while Docker stopped or restarted the engine (a daemon restart, the restart policy after a crash) is no failure
    of the start that comes next, which gets its own load time and count."""
    now = head_status(config)
    if now == head:
        return None
    if now[0] == "no daemon":
        return "the Docker daemon stopped answering"
    if now[0] == "restarting":
        return "Docker's restart policy began bringing the head container back"
    return f"the head container went from {head[0]} (started {head[1]}) to {now[0]} (started {now[1]})"


def seconds_since(started_at, now):
    """Seconds from Docker's StartedAt (RFC 3339, nanoseconds) to `now` (epoch), or None when unreadable."""
    try:
        began = datetime.datetime.fromisoformat(started_at[:19]).replace(tzinfo=datetime.UTC)
    except (TypeError, ValueError):
        return None
    return now - began.timestamp()


def link_problems(config):
    size = int(config["mtu"]) - 28  # IPv4 + ICMP headers: the largest unfragmented ping
    problems = []
    for peer in config["peers"]:
        rc, _ = run(["ping", "-M", "do", "-s", str(size), "-c", "1", "-W", "2", peer["address"]], timeout=10)
        if rc != 0:
            problems.append(f"fast link to {peer['host']} ({peer['address']}) drops DF pings of {size} bytes")
    return problems


def api_key(config):
    path = config.get("secrets_file")
    if not path or not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as env:
        for line in env:
            if line.startswith("VLLM_API_KEY="):
                return line.split("=", 1)[1].strip()
    return None


def read_secret(path):
    """A one-line secret file's text (the router credential), or None when there is none."""
    if not path or not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as secret:
        return secret.read().strip() or None


def request(config, path, body=None):
    """A request to the head's API on loopback, with the key when the service has one."""
    req = urllib.request.Request(
        f"http://127.0.0.1:{config['port']}{path}",
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    key = api_key(config)
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    return req


def post_problem(config, path, body, timeout):
    """None when the head answers `body` at `path` with at least one choice within `timeout`, else why not."""
    try:
        with urllib.request.urlopen(request(config, path, body), timeout=timeout) as response:
            choices = json.load(response).get("choices") or []
            return None if choices else "a generation returned no choices"
    except urllib.error.HTTPError as error:
        return f"a generation failed with HTTP {error.code}"
    except (OSError, ValueError) as error:
        return f"a generation failed: {error}"


def generation_problem(config, timeout=None):
    """None when one token comes back, else why not: every rank takes part in every forward pass."""
    body = {"model": config["model"], "prompt": "ping", "max_tokens": 1}
    return post_problem(config, "/v1/completions", body, timeout or config["generation_timeout_s"])


def warmup_problem(config):
    """The profile's warm-up chats, as the deploy sends them after a start (tasks/warmup.yml; tool calls left out):
    a fresh engine pays its first forward passes here. The test bed's CPU build crashed a worker (SIGILL) when a
    restarted pair's very first request was the 2-token generation. None when every one answers."""
    for item in config.get("warmup", []):
        if item.get("tool"):
            continue
        content = item.get("prompt") or "the " * int(item.get("prompt_tokens", 16))
        body = {
            "model": config["model"],
            "max_tokens": int(item.get("max_tokens", 16)),
            "messages": [{"role": "user", "content": content}],
        }
        problem = post_problem(config, "/v1/chat/completions", body, config["load_timeout_s"])
        if problem:
            return f"warm-up {item.get('name')}: {problem}"
    return None


# The engine's own counters (vLLM v1 /metrics, summed over engines and labels): requests pending, and every number
# that moves while the engine steps: tokens generated and prefilled, steps, KV blocks in use (a chunked prefill of a
# long prompt allocates blocks at each step before its first token), prefix-cache lookups and preemptions.
PENDING = ("vllm:num_requests_running", "vllm:num_requests_waiting")
PROGRESS = (
    "vllm:generation_tokens_total",
    "vllm:prompt_tokens_total",
    "vllm:iteration_tokens_total_count",
    "vllm:kv_cache_usage_perc",
    "vllm:prefix_cache_queries_total",
    "vllm:num_preemptions_total",
)


def parse_metrics(text):
    """{name: value summed over its label sets} for PENDING and PROGRESS from Prometheus text."""
    values = {}
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in PENDING or name in PROGRESS:
            try:
                values[name] = values.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
            except (IndexError, ValueError):
                continue
    return values


def read_metrics(config):
    """The engine's counters, or None when /metrics does not answer within generation_timeout_s."""
    try:
        with urllib.request.urlopen(request(config, "/metrics"), timeout=config["generation_timeout_s"]) as answer:
            return parse_metrics(answer.read().decode("utf-8", "replace"))
    except (OSError, ValueError):
        return None


def progress_mark(values):
    return [values.get(name, 0.0) for name in PROGRESS]


def pending(values):
    return int(sum(values.get(name, 0.0) for name in PENDING))


def load_state(path):
    try:
        with open(path, encoding="utf-8") as state:
            return json.load(state)
    except (OSError, ValueError):
        return {}


def save_state(path, state):
    """Written whole (temp file, then rename); a state that cannot be written is said on stdout, never fatal."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".tmp", "w", encoding="utf-8") as out:
            json.dump(state, out)
        os.replace(path + ".tmp", path)
    except OSError as error:
        print(f"spark-serve-watchdog: could not save the state to {path} ({error})", flush=True)


def record(config, event):
    """One event line: printed (the journal keeps it under systemd) and appended to the node's record folder. A
    folder that cannot be written (a full disk) is said on stdout too, and never stops the watchdog acting."""
    line = json.dumps(dict(event, time=time.strftime("%Y-%m-%dT%H:%M:%S%z")))
    print(f"spark-serve-watchdog: {line}", flush=True)
    try:
        os.makedirs(config["record_dir"], exist_ok=True)
        with open(os.path.join(config["record_dir"], "watchdog-events.jsonl"), "a", encoding="utf-8") as log:
            log.write(line + "\n")
    except OSError as error:
        print(f"spark-serve-watchdog: could not record the event above ({error}); acting anyway", flush=True)
    export_metrics(config)  # at once: a trip's restart may take minutes before the look ends
    notify(config, line)


def notify(config, line):
    """The inventory's notification command, given the event line on its stdin: started detached under `timeout`,
    so a slow or hung receiver never delays the stop or the restart it reports. The line holds no key and no prompt
    (the watchdog's own probe is its only generation); a command that cannot start is said on stdout."""
    command = config.get("notify_command") or []
    if not command:
        return
    argv = ["timeout", str(int(config.get("notify_timeout_s", 30))), *command]
    try:
        receiver = subprocess.Popen(argv, stdin=subprocess.PIPE, text=True, start_new_session=True)
        receiver.stdin.write(line + "\n")
        receiver.stdin.close()
    except OSError as error:
        print(f"spark-serve-watchdog: the notification command {command[0]} did not run ({error})", flush=True)


# Every event a look can record: each is exported from the first look on (0 until it happens), so that an alert on
# its increase fires at its first occurrence.
EVENTS = (
    "look failed",
    "service unhealthy",
    "stop failed",
    "auto-restart waits",
    "auto-restart ready",
    "auto-restart failed",
)


def event_counts(config):
    """{event: how many times the node's record folder holds it} for EVENTS (the record is the counter's source:
    it survives deploys and reboots, so the exported counter never goes back)."""
    counts = dict.fromkeys(EVENTS, 0)
    try:
        with open(os.path.join(config["record_dir"], "watchdog-events.jsonl"), encoding="utf-8") as log:
            for line in log:
                try:
                    event = json.loads(line).get("event")
                except (ValueError, AttributeError):
                    continue
                if event in counts:
                    counts[event] += 1
    except OSError:
        pass
    return counts


def metrics_text(config, state, counts, now):
    """The watchdog's verdicts in Prometheus' text format, for the node exporter's textfile collector."""
    gauges = {
        "armed": ("whether the watchdog judges the service (0 while a deploy starts it)", config.get("armed")),
        "tripped": ("whether it stopped the head for a fault not yet recovered", state.get("tripped")),
        "restart_waiting": ("whether a due automatic restart waits for a worker", state.get("restart_due")),
        "failed_looks": ("consecutive failed looks at the running head", state.get("failed_looks", 0)),
        "last_look_timestamp_seconds": ("when the watchdog last looked", now),
    }
    lines = []
    for name, (meaning, value) in gauges.items():
        lines += [f"# HELP spark_serve_watchdog_{name} {meaning}", f"# TYPE spark_serve_watchdog_{name} gauge"]
        lines.append(f"spark_serve_watchdog_{name} {float(value or 0)}")
    lines += [
        "# HELP spark_serve_watchdog_events_total events the watchdog recorded, by event",
        "# TYPE spark_serve_watchdog_events_total counter",
    ]
    lines += [f'spark_serve_watchdog_events_total{{event="{event}"}} {n}' for event, n in counts.items()]
    lines += [
        "# HELP spark_serve_rank_container_running whether each rank's container runs, as the last look found it",
        "# TYPE spark_serve_rank_container_running gauge",
    ]
    lines += [
        f'spark_serve_rank_container_running{{rank="{r["rank"]}",host="{r["host"]}"}} {float(r["running"])}'
        for r in state.get("ranks", [])
    ]
    return "\n".join(lines) + "\n"


def export_metrics(config):
    """Written whole after every look and every recorded event (temp file, then rename: the collector never reads
    half a file); a file that cannot be written is said on stdout, never fatal."""
    path = config.get("metrics_file")
    if not path:
        return
    text = metrics_text(config, load_state(config["state_file"]), event_counts(config), time.time())
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".tmp", "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(path + ".tmp", path)
    except OSError as error:
        print(f"spark-serve-watchdog: could not export the metrics to {path} ({error})", flush=True)


def tell_router(config, action):
    """In a fleet, the router's remove_worker or add_worker for this replica: 'done', what failed, or None without
    a router. Never stops the watchdog acting (the router's own health check is the net under it)."""
    router = config.get("router") or {}
    if not router:
        return None
    member = urllib.parse.quote(router["member"], safe="")
    request = urllib.request.Request(f"{router['url']}/{action}?url={member}", method="POST")
    credential = read_secret(router.get("credential_file"))
    if credential:  # this head's own: the router's door lets it name this replica's URL only
        request.add_header("Authorization", f"Bearer {credential}")
    try:
        context = ssl.create_default_context(cafile=router["ca_file"])
        # An add waits while the router checks the replica's /health (at most its 30 s worker startup timeout).
        with urllib.request.urlopen(request, timeout=40 if action == "add_worker" else 5, context=context):
            return "done"
    except urllib.error.HTTPError as error:
        already = action == "add_worker" and "already exists" in error.read().decode("utf-8", "replace")
        return "done" if already else f"failed: HTTP {error.code}"
    except (OSError, ssl.SSLError) as error:
        return f"failed: {getattr(error, 'reason', error)}"


def trip(config, started_at, problems, recover):
    """Take the replica out of its fleet's router, record why, then stop the head so that clients see the service
    down (the reason is kept even if the stop hangs)."""
    routed = tell_router(config, "remove_worker")
    record(
        config,
        {
            "event": "service unhealthy",
            "problems": problems,
            "action": f"stopping {config['container']} so that /health fails",
            "head_started_at": started_at,
            "recover": recover,
            **({"router_remove": routed} if routed else {}),
        },
    )
    mark_cache_untrusted(config)
    rc, out = run(["docker", "stop", "--time", "10", config["container"]], timeout=60)
    if rc != 0:
        record(config, {"event": "stop failed", "container": config["container"], "detail": out})


def untrusted_mark(config):
    return config["engine_cache_dir"].rstrip("/") + ".untrusted"


def mark_cache_untrusted(config):
    """What the tripped engine wrote to vLLM's compile cache is not to be loaded again: a mark beside the head's
    folder for the next deploy's start (without auto_restart), cleared once every rank's folder is wiped. A mark that
    cannot be written never keeps the head from being stopped."""
    if not config.get("engine_cache_dir"):
        return
    try:
        with open(untrusted_mark(config), "w", encoding="utf-8") as mark:
            mark.write(time.strftime("%Y-%m-%dT%H:%M:%S%z") + "\n")
    except OSError as error:
        print(f"spark-serve-watchdog: could not mark the compile cache untrusted: {error}", flush=True)


def wipe_caches(config):
    """After a trip, every rank stopped: every rank's compile cache emptied, then the mark cleared; the failures."""
    folder = config.get("engine_cache_dir")
    if not folder:
        return []
    failures = on_every_worker(config, "wipe-cache")
    rc, out = run(["find", folder, "-mindepth", "1", "-delete"], timeout=300)
    failures += [] if rc == 0 or not os.path.isdir(folder) else [f"head: {out}"]
    if not failures and os.path.exists(untrusted_mark(config)):
        os.remove(untrusted_mark(config))
    return failures


def peer_command(config, peer, command, timeout=120):
    """Run one of the worker's allowed commands (stop, start, state): the key's forced command picks the action."""
    return run(
        [
            "ssh",
            "-i",
            config["key_file"],
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=10",
            "-o",
            "StrictHostKeyChecking=yes",  # the deploy seeds each worker's host key: no trust on first use
            "-o",
            f"UserKnownHostsFile={config['known_hosts']}",
            f"root@{peer['address']}",
            command,
        ],
        timeout=timeout,
    )


def head_compose(config, *args):
    project = ["docker", "compose", "-p", config["project"], "--project-directory", config["compose_dir"]]
    return run(project + list(args), timeout=300)


def health(config):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{config['port']}/health", timeout=5) as response:
            return response.status
    except (OSError, ValueError):
        return None


def on_every_worker(config, command):
    """Run `command` on every worker; the failures, each naming its worker."""
    answers = {peer["host"]: peer_command(config, peer, command) for peer in config["peers"]}
    return [f"{host}: {out}" for host, (rc, out) in answers.items() if rc != 0]


def stop_all(config):
    """Every rank stopped and removed (SIGTERM, then 10 s): a rank restarted alone could not rejoin the others."""
    failures = on_every_worker(config, "stop")
    rc, out = head_compose(config, "down", "--timeout", "10", "--remove-orphans")
    return failures + ([f"head: {out}"] if rc != 0 else [])


def restart_problem(config):
    """The deploy's staged order, all ranks at once: None once a generation answers within load_timeout_s."""
    failures = stop_all(config)
    wiped = wipe_caches(config) if not failures else []
    if wiped:
        return "could not wipe vLLM's compile cache: " + "; ".join(wiped)
    failures += on_every_worker(config, "start")
    if failures:
        return "could not restart: " + "; ".join(failures)
    rc, out = head_compose(config, "up", "-d")
    if rc != 0:
        return f"head did not start: {out}"
    began = time.monotonic()
    for _ in range(int(config["load_timeout_s"]) // 2 + 1):  # a look every 2 s at most
        if time.monotonic() - began > config["load_timeout_s"]:
            break
        dead = [p["host"] for p in config["peers"] if peer_command(config, p, "state", timeout=30)[1] != "running"]
        if head_status(config)[0] != "running" or dead:
            return f"a rank stopped while the service loaded: {', '.join(dead) or 'the head'}"
        if health(config) == 200:
            return warmup_problem(config) or generation_problem(config, config["load_timeout_s"])
        time.sleep(2)
    return f"not ready within {config['load_timeout_s']} s"


def keep_head_log(config):
    """The head's last log lines beside the events (its container is removed next): why the restart failed."""
    rc, out = run(["docker", "logs", "--tail", "300", config["container"]], timeout=60)
    if rc != 0:
        return None
    path = os.path.join(config["record_dir"], f"watchdog-{time.strftime('%Y%m%dT%H%M%S')}-{config['container']}.log")
    with open(path, "w", encoding="utf-8") as log:
        log.write(out + "\n")
    return path


def workers_not_back(config):
    """What keeps a restart from starting now, one line per worker: a node that still boots (no SSH answer, no Docker
    daemon) or whose fast link does not carry the fabric's MTU yet. Empty once every worker can take its rank."""
    absent = []
    for peer in config["peers"]:
        rc, out = peer_command(config, peer, "state", timeout=30)
        if rc != 0:
            absent.append(f"{peer['host']} ({peer['address']}): {out or f'exit {rc}'}")
    return absent or link_problems(config)


def restart_or_wait(config, state):
    """Restart now when every worker can take its rank, else leave the restart due: the next looks try again (a
    worker that boots after a power cut comes back within minutes; the wait is recorded once)."""
    absent = workers_not_back(config)
    if absent:
        if not state.get("restart_due"):
            record(config, {"event": "auto-restart waits", "waiting_for": absent})
            state.update(restart_due=True, waiting_since=time.time())
        return
    waited = time.time() - state.pop("waiting_since", time.time()) if state.pop("restart_due", False) else 0.0
    auto_restart(config, state, waited)


def restart_when_back(config, state):
    """A look while a restart is due: nothing is judged (every rank is stopped); the restart runs once every worker
    answers, holding the inventory's lock as any act does."""
    token, why = take_lock(config)
    if token is None or not still_armed(config):
        print(f"spark-serve-watchdog: standing down: {why or 'a deploy disarmed the watchdog'}", flush=True)
        if token:
            release_lock(config, token)
        return
    try:
        restart_or_wait(config, state)
    finally:
        release_lock(config, token)
    save_state(config["state_file"], state)


def auto_restart(config, state, waited_s=0.0):
    """Restart the service after a trip; on failure every rank stays stopped, a stated clean state."""
    state["restarts"] = state.get("restarts", 0) + 1
    began = time.monotonic()
    problem = restart_problem(config)
    seconds = round(time.monotonic() - began, 1)
    if problem is None:
        routed = tell_router(config, "add_worker")
        event = {"event": "auto-restart ready", "seconds": seconds, "restart": state["restarts"]}
        if waited_s:
            event["waited_for_workers_s"] = round(waited_s, 1)
        record(config, dict(event, **({"router_add": routed} if routed else {})))
        state.update(tripped=False, failed_looks=0, progress_at=time.time())
        return
    record(
        config,
        {
            "event": "auto-restart failed",
            "problem": problem,
            "seconds": seconds,
            "action": "every rank stopped",
            "head_log": keep_head_log(config),
            "recover": "ansible-playbook site.yml --tags deploy",
        },
    )
    stop_all(config)


def busy_or_idle_problems(config, state, now):
    """The engine's side of a look: with work pending, whether its counters advanced within progress_timeout_s;
    idle, whether one generation answers (or the counters moved while it waited: a request arrived)."""
    values = read_metrics(config)
    if values is None:
        return [f"/metrics did not answer within {config['generation_timeout_s']} s"]
    mark, waiting = progress_mark(values), pending(values)
    moved = mark != state.get("mark") or not state.get("busy")  # progress, or work that just arrived
    state.update(mark=mark, busy=bool(waiting), progress_at=now if moved else state.get("progress_at", now))
    if waiting:
        stale = now - state["progress_at"]
        if not moved and stale >= config["progress_timeout_s"]:
            return [f"{waiting} request(s) running or waiting and no token progress for {stale:.0f} s"]
        return []
    problem = generation_problem(config)
    if problem is None:
        return []
    after = read_metrics(config)
    if after is not None and progress_mark(after) != mark and pending(after):
        state.update(mark=progress_mark(after), busy=True, progress_at=time.time())
        return []  # the probe queued behind a request that arrived meanwhile and progresses
    return [problem]


def judge(config, state, now):
    """(verdict, problems, head) of one look: "skip" (nothing can be judged now), "ok" or "failed", and the head's
    (status, StartedAt) it judged."""
    held = deploy_holds_lock(config)
    if held:
        return "skip", [held], (None, None)
    head = head_status(config)
    verdict, problems = judge_head(config, state, now, *head)
    moved = verdict == "failed" and head_moved(config, head)
    if moved:  # the problems were Docker stopping or restarting the engine: said in the journal, not counted
        print(f"spark-serve-watchdog: not counted ({'; '.join(problems)}): {moved} during the look", flush=True)
        return "skip", [moved], head
    return verdict, problems, head


def judge_head(config, state, now, status, started_at):
    """(verdict, problems) of the head start a look found and of the service it runs."""
    if status == "no daemon":
        return "skip", ["the Docker daemon does not answer"]
    if status == "restarting":
        return "skip", ["Docker's restart policy is bringing the head container back"]
    if state.get("tripped"):
        if status != "running" or state.get("tripped_head") == started_at:
            return "skip", ["acted on already"]  # the next start of the service resets the state
        state.clear()  # the head was started again since the trip (a deploy): the trip is history
    if status != "running":
        return "failed", [f"head container {config['container']} is not running"]
    age = seconds_since(started_at, now)
    loading = state.get("ready_head") != started_at and age is not None and age < config["load_timeout_s"]
    if loading and health(config) != 200:
        return "skip", [f"head started {age:.0f} s ago and still loads (grace {config['load_timeout_s']} s)"]
    problems = link_problems(config)
    if problems:
        return "failed", problems
    problems = busy_or_idle_problems(config, state, now)
    if problems:
        return "failed", problems
    state["ready_head"] = started_at  # seen serving: no more grace for this start of the container
    return "ok", []


def read_lock(config):
    """The inventory lock's holder, None when free, {} when unreadable (inventory_lock.parse)."""
    try:
        with open(config["lock_file"], encoding="utf-8") as lock:
            return inventory_lock.parse(lock.read())
    except FileNotFoundError:
        return None
    except OSError:
        return {}


def pid_alive(pid):
    try:
        os.kill(int(pid), 0)
    except (OSError, ValueError):
        return False
    return True


def deploy_holds_lock(config):
    """Why a look must not judge now (a deploy or rollback holds the inventory's lock), or None."""
    holder = read_lock(config)
    if not holder or holder.get("kind") == "watchdog":
        return None
    may, why = inventory_lock.watchdog_may_act(holder, time.time(), None)
    return None if may else why


def take_lock(config):
    """(token, None) once this process holds the inventory's lock, else (None, why not): nobody else may stop or
    restart the service meanwhile, and a deploy that wants it stops this process first. ("", None) when the lock
    cannot be written at all: the watchdog acts anyway."""
    holder = read_lock(config)
    may, why = inventory_lock.watchdog_may_act(holder, time.time(), holder and pid_alive(holder.get("pid")))
    if not may:
        return None, why
    me = {
        "kind": "watchdog",
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "command": "spark-serve-watchdog (stop, then restart when auto_restart)",
        "since": time.time(),
        "token": uuid.uuid4().hex,
    }
    path = config["lock_file"]
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(f"{path}.{me['token']}", "w", encoding="utf-8") as temp:
            json.dump(me, temp)
        if holder is None:
            os.link(f"{path}.{me['token']}", path)  # fails when another run took it meanwhile
        else:
            os.replace(f"{path}.{me['token']}", path)  # a stale holder's lock
    except OSError as error:  # a full disk: never fail open, act without the lock and say so
        print(f"spark-serve-watchdog: could not write the lock {path} ({error}); acting without it", flush=True)
        return "", None
    finally:
        if os.path.exists(f"{path}.{me['token']}"):
            os.unlink(f"{path}.{me['token']}")
    return me["token"], None


def release_lock(config, token):
    holder = read_lock(config)
    if holder and holder.get("token") == token:
        try:
            os.unlink(config["lock_file"])
        except OSError as error:
            print(f"spark-serve-watchdog: could not release the lock ({error})", flush=True)


def still_armed(config):
    """The configuration as it is on disk now: a deploy disarms it before it starts the ranks."""
    try:
        with open(config["path"], encoding="utf-8") as source:
            return bool(json.load(source).get("armed"))
    except (KeyError, OSError, ValueError):
        return bool(config.get("armed"))


def look(config):
    """One look; returns the problems it acted on (empty when healthy, disarmed, not yet sure or acted on)."""
    if not config.get("armed"):
        return []
    state = load_state(config["state_file"])
    if state.get("restart_due"):
        restart_when_back(config, state)
        return []
    verdict, problems, head = judge(config, state, time.time())
    if head[0] not in (None, "no daemon"):  # not while a deploy holds the lock, nor while Docker does not answer
        state["ranks"] = rank_states(config, head[0])
    if verdict != "failed":
        state["failed_looks"] = 0 if verdict == "ok" else state.get("failed_looks", 0)
        save_state(config["state_file"], state)
        return []
    if state.get("failed_head") != head[1]:
        state["failed_looks"] = 0  # looks about an earlier start of the head never count toward acting on this one
    state.update(failed_head=head[1], failed_looks=state.get("failed_looks", 0) + 1)
    if state["failed_looks"] < config["failed_looks"]:
        record(
            config,
            {
                "event": "look failed",
                "problems": problems,
                "look": state["failed_looks"],
                "acts_after": config["failed_looks"],
            },
        )
        save_state(config["state_file"], state)
        return []
    token, why = take_lock(config)
    if token is None or not still_armed(config):
        print(f"spark-serve-watchdog: standing down: {why or 'a deploy disarmed the watchdog'}", flush=True)
        if token:
            release_lock(config, token)
        return []
    try:
        acted = act(config, state, problems, head)
    finally:
        release_lock(config, token)
    return problems if acted else []


def rank_states(config, head_status_now):
    """[{rank, host, running}] for the metrics: the head's container as the look found it, and each worker's as its
    rank control reports it over the restart path's SSH (only where auto_restart installed the key). A worker that
    does not answer is left out: unknown is not gone, and the link's own rule judges an unreachable worker."""
    ranks = [{"rank": 0, "host": config.get("host", "head"), "running": head_status_now == "running"}]
    if not os.path.exists(config.get("key_file") or ""):
        return ranks
    for rank, peer in enumerate(config["peers"], start=1):
        rc, out = peer_command(config, peer, "state", timeout=10)
        if rc == 0:
            ranks.append({"rank": rank, "host": peer["host"], "running": out.strip() == "running"})
    return ranks


def act(config, state, problems, head):
    """Stop the head (and restart the service with auto_restart), holding the inventory's lock; True once done.
    Only the head start the failed looks judged: Docker may have restarted it since (read again here), and a new
    start is left to its own load time and looks."""
    moved = head_moved(config, head)
    if moved:
        print(f"spark-serve-watchdog: standing down: {moved} since the look", flush=True)
        state["failed_looks"] = 0
        save_state(config["state_file"], state)
        return False
    restart = bool(config.get("auto_restart")) and state.get("restarts", 0) < config.get("auto_restart_max", 0)
    trip(config, head[1], problems, "auto-restart" if restart else "ansible-playbook site.yml --tags deploy")
    state.update(tripped=True, tripped_head=head[1])
    save_state(config["state_file"], state)  # acted on, even if the restart below is cut short
    if restart:
        restart_or_wait(config, state)
    save_state(config["state_file"], state)
    return True


def check_peers(config):
    """The restart path tried before a fault needs it: the rank control's `state` on every worker, with the
    watchdog's own key and known hosts. One line per worker; 1 when any cannot be reached."""
    failed = False
    for peer in config["peers"]:
        rc, out = peer_command(config, peer, "state", timeout=30)
        failed |= rc != 0
        print(f"{peer['host']} ({peer['address']}): " + (f"rank {out}" if rc == 0 else f"unreachable: {out}"))
    return 1 if failed else 0


def main(argv):
    if len(argv) not in (2, 3) or argv[2:] not in ([], ["--peers"]):
        print("\n".join(line.strip() for line in __doc__.strip().splitlines()[-2:]), file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as source:
        config = dict(json.load(source), path=argv[1])
    if argv[2:] == ["--peers"]:
        return check_peers(config)
    try:
        return 1 if look(config) else 0
    finally:
        export_metrics(config)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
