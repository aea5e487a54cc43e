#!/usr/bin/python3
"""spark-serve watchdog: one look at a ready vLLM service from its head node, run every few seconds by a systemd
timer (spark-serve-watchdog.timer), installed by the vllm_service role.

Each run checks the head's engine container, DF-pings every worker over the fast link at the fabric's MTU and, at a
longer interval, sends one tiny generation: /health stays 200 with a dead worker or a wedged scheduler, and only a
generation needs every rank (each forward pass runs on all of them). On a problem it makes the service visibly
unhealthy by stopping the head (its /health then fails for clients and load balancers), prints one event line (the
journal keeps it) and appends it to the node's record folder. With the profile's `auto_restart`, it then restarts
the whole service in the deploy's order: every rank stopped, the workers started (over SSH with a key that may only
run the node's spark-serve-rank-control), then the head; the service must answer the profile's warm-up and a
generation within the load time, else every rank is stopped again (the head's last log lines are kept). It acts
once per fault and restarts at most `auto_restart_max` times between two deploys: the role resets its state after
the next start, and disarms it while a start runs. Standard library only.

    spark-serve-watchdog.py /etc/spark-serve/watchdog.json
"""

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request


def run(argv, timeout=30):
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as error:
        return 1, str(error)
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def head_started_at(config):
    """The head container's StartedAt when it runs, else None."""
    rc, out = run(["docker", "inspect", "-f", "{{.State.Status}} {{.State.StartedAt}}", config["container"]])
    status = out.split()
    return status[1] if rc == 0 and len(status) == 2 and status[0] == "running" else None


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


def post_problem(config, path, body):
    """None when the head answers `body` at `path` with at least one choice, else why not."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{config['port']}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    key = api_key(config)
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=config["generation_timeout_s"]) as response:
            choices = json.load(response).get("choices") or []
            return None if choices else "a generation returned no choices"
    except urllib.error.HTTPError as error:
        return f"a generation failed with HTTP {error.code}"
    except (OSError, ValueError) as error:
        return f"a generation failed: {error}"


def generation_problem(config):
    """None when one token comes back, else why not: every rank takes part in every forward pass."""
    return post_problem(config, "/v1/completions", {"model": config["model"], "prompt": "ping", "max_tokens": 1})


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
        problem = post_problem(config, "/v1/chat/completions", body)
        if problem:
            return f"warm-up {item.get('name')}: {problem}"
    return None


def load_state(path):
    try:
        with open(path, encoding="utf-8") as state:
            return json.load(state)
    except (OSError, ValueError):
        return {}


def save_state(path, state):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as out:
        json.dump(state, out)
    os.replace(path + ".tmp", path)


def record(config, event):
    """One event line: printed (the journal keeps it under systemd) and appended to the node's record folder."""
    line = json.dumps(dict(event, time=time.strftime("%Y-%m-%dT%H:%M:%S%z")))
    print(f"spark-serve-watchdog: {line}", flush=True)
    os.makedirs(config["record_dir"], exist_ok=True)
    with open(os.path.join(config["record_dir"], "watchdog-events.jsonl"), "a", encoding="utf-8") as log:
        log.write(line + "\n")


def trip(config, started_at, problems, recover):
    """Record why, then stop the head so that clients see the service down (the reason is kept even if the stop
    hangs)."""
    record(
        config,
        {
            "event": "service unhealthy",
            "problems": problems,
            "action": f"stopping {config['container']} so that /health fails",
            "head_started_at": started_at,
            "recover": recover,
        },
    )
    rc, out = run(["docker", "stop", "--time", "10", config["container"]], timeout=60)
    if rc != 0:
        record(config, {"event": "stop failed", "container": config["container"], "detail": out})


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
            "StrictHostKeyChecking=accept-new",
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
        if head_started_at(config) is None or dead:
            return f"a rank stopped while the service loaded: {', '.join(dead) or 'the head'}"
        if health(config) == 200:
            return warmup_problem(config) or generation_problem(config)
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


def auto_restart(config, state):
    """Restart the service after a trip; on failure every rank stays stopped, a stated clean state."""
    state["restarts"] = state.get("restarts", 0) + 1
    began = time.monotonic()
    problem = restart_problem(config)
    seconds = round(time.monotonic() - began, 1)
    if problem is None:
        record(config, {"event": "auto-restart ready", "seconds": seconds, "restart": state["restarts"]})
        state.update(tripped=False, generated_at=time.time())
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


def look(config):
    """One look; returns the problems found (empty when healthy, disarmed or already acted on)."""
    if not config.get("armed"):
        return []
    state = load_state(config["state_file"])
    if state.get("tripped"):
        return []  # acted on already: the next start of the service resets the state
    started_at = head_started_at(config)
    problems = [f"head container {config['container']} is not running"] if started_at is None else []
    problems = problems or link_problems(config)
    now = time.time()
    if not problems and now - state.get("generated_at", 0) >= config["generation_every_s"]:
        state["generated_at"] = now
        problem = generation_problem(config)
        problems += [problem] if problem else []
    if problems:
        restart = bool(config.get("auto_restart")) and state.get("restarts", 0) < config.get("auto_restart_max", 0)
        trip(config, started_at, problems, "auto-restart" if restart else "ansible-playbook site.yml --tags deploy")
        state["tripped"] = True
        save_state(config["state_file"], state)  # acted on, even if the restart below is cut short
        if restart:
            auto_restart(config, state)
    save_state(config["state_file"], state)
    return problems


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as source:
        config = json.load(source)
    return 1 if look(config) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
