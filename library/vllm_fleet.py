#!/usr/bin/python
"""Ansible module: check or roll out a fleet's replicas one at a time behind vLLM's router."""

DOCUMENTATION = r"""
---
module: vllm_fleet
short_description: Check, update one at a time, or report the replicas of a fleet behind vLLM's router
description:
  - Each replica is an inventory of its own (a single Spark, a pair or a quad, with its own profile, records, gate
    and rollback); this module runs that inventory's C(site.yml) as a user would, from the project root.
  - I(mode=validate) runs every replica's C(site.yml --tags validate) and fails listing every replica that is
    refused, before any host changes. With I(certificates) it then issues every replica's door certificate on the
    controller (C(playbooks/door-certificate.yml), no node reached), so that the fleet's CA permits every door's
    names before the router takes its copy.
  - I(mode=rollout) takes the replicas in order. A replica the router routes to is removed from it, and the module
    waits (at most I(drain_timeout_s)) until the replica's door reports no running or waiting request
    (C(vllm:num_requests_running), C(vllm:num_requests_waiting) in its /metrics). Then the replica's own
    C(site.yml) runs (staged start, gate, record; a rejected deploy rolls that replica back), told its URL at the
    router (C(vllm_service_router_member), for its watchdog). A replica whose door
    answers /health afterwards is added back to the router, on its new deployment or on the previous one.
  - The first replica that fails stops the rollout; the module fails naming it, why, whether it serves again, and
    the replicas it did not touch. The others keep serving throughout.
  - I(mode=status) reports the router's view (its /health, the replicas it routes to, their loads) beside each
    replica's door (/health, requests in flight) and its own C(playbooks/status.yml) (every rank alive, no drift);
    read-only. It fails when the router or any replica is not well, after reporting all of them.
  - In check mode, I(mode=rollout) changes nothing; it runs each replica's C(site.yml --check --diff) (the same tags
    and variables) and returns how many tasks each would change, its log holding the diff; the router is not
    called. I(mode=validate) issues no certificate; I(mode=status) is read-only anyway.
  - Each replica run's output is kept in I(log_dir)/<replica>.log (C(<replica>-check.log) in check mode).
  - A replica list with problems (no name, no inventory folder, a URL that is not https, a repeated name) is
    refused listing every problem, before any replica runs.
options:
  mode:
    description: C(validate) checks every replica; C(rollout) updates them; C(status) reports them.
    type: str
    choices: [validate, rollout, status]
    default: rollout
  replicas:
    description: The replicas in rollout order, each with C(name), C(inventory) (relative to I(project_dir) or
      absolute) and C(url), its door as the router reaches it (C(https://<head>:8443)).
    type: list
    elements: dict
    required: true
  router_url:
    description: The router's door (C(https://<router host>:8443)); its admin API answers the controller only.
    type: str
  ca_file:
    description: The CA the router's and the replicas' doors are signed by.
    type: path
  admin_key_file:
    description:
      - The router's admin key on the controller (roles/vllm_router's C(vllm_router_admin_key_file)); empty, the admin
        API is called without a credential. I(mode=rollout) derives each replica head's own credential from it.
    type: path
    default: ""
  project_dir:
    description: The project root (its ansible.cfg and site.yml).
    type: path
    required: true
  log_dir:
    description: Controller folder for each replica run's output.
    type: path
    required: true
  tags:
    description: Tags passed to every replica's C(site.yml) in I(mode=rollout) (none, the whole site.yml).
    type: list
    elements: str
    default: []
  replica_extra_vars:
    description: Extra variables for every replica's run (written to a 0600 file, passed as C(-e @file)).
    type: dict
    default: {}
  drain_timeout_s:
    description: Longest wait for a replica out of rotation to finish its requests; the deploy then goes ahead.
    type: float
    default: 300
  deploy_timeout_s:
    description: Longest one replica's C(site.yml) may run.
    type: float
    default: 3600
  certificates:
    description:
      - In I(mode=validate), issue every replica's door certificate on the controller after the checks pass (the run
        goes on to start the router, which takes its copy of the fleet's CA then).
    type: bool
    default: false
author:
  - spark-serve
"""

EXAMPLES = r"""
- name: Update the replicas one at a time
  vllm_fleet:
    replicas:
      - {name: a, inventory: inventories/spark-pair, url: "https://spark-a.local:8443"}
      - {name: b, inventory: inventories/spark-pair-b, url: "https://spark-c.local:8443"}
    router_url: https://router.local:8443
    ca_file: .spark-serve/front-door/ca.pem
    project_dir: "{{ playbook_dir }}/.."
    log_dir: .spark-serve/fleet
"""

RETURN = r"""
replicas:
  description: What happened to each replica the rollout reached, in order.
  returned: mode=rollout
  type: list
  elements: dict
  sample:
    - {name: a, url: "https://spark-a.local:8443", was_member: true, drained_s: 2.0, left_in_flight: 0,
       deploy_s: 611.4, deployed: true, serving: true, back_in_rotation: true, problem: ""}
members:
  description: The router's workers after the rollout (what a restarted router takes back).
  returned: mode=rollout
  type: list
  elements: str
  sample: ["https://spark-a.local:8443", "https://spark-c.local:8443"]
router:
  description: In mode=status, the router's view - its /health (503 while any worker is unhealthy, null when its
    door did not answer), the replicas it routes to (null when its admin API did not answer) and their loads.
  returned: mode=status
  type: dict
  sample: {health: 200, members: ["https://spark-a.local:8443"], loads: {"https://spark-a.local:8443": 2}}
status:
  description: In mode=status, each replica - in rotation, its door's /health and requests in flight, and its own
    status.yml verdict (C(ok), C(summary)).
  returned: mode=status
  type: list
  elements: dict
  sample:
    - {name: a, url: "https://spark-a.local:8443", in_rotation: true, health: 200, in_flight: 0, ok: true,
       summary: "all 2 rank(s) alive; head /health 200"}
preview:
  description: In check mode with mode=rollout, each replica's C(site.yml --check --diff) - how many tasks it would
    change (from its play recap), whether the check ran through and if not why, and its log (the diff).
  returned: mode=rollout and check mode
  type: list
  elements: dict
  sample:
    - {name: a, url: "https://spark-a.local:8443", would_change: 3, ok: true, problem: "",
       log: .spark-serve/fleet/a-check.log}
refused:
  description: In mode=validate, each refused replica with the end of its validate output.
  returned: mode=validate
  type: dict
heads:
  description: In mode=validate, each replica's head address as the controller resolves its door URL's host.
  returned: mode=validate and success
  type: dict
  sample: {pair-a: 192.168.1.21, pair-b: 192.168.1.23}
problems:
  description: Every problem with the replica list, when it is refused before anything runs.
  returned: failure
  type: list
  elements: str
"""

import contextlib
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.door_keys import member_credential
from ansible.module_utils.fleet_rollout import FleetOps, in_flight, replica_problems, roll_out
from ansible.module_utils.openai_client import ServerUnreachable, read_metrics

HTTP_TIMEOUT_S = 10


def ansible_playbook():
    """The ansible-playbook beside the Python that runs this module (the controller's, with the project's pins)."""
    return os.path.join(os.path.dirname(sys.executable), "ansible-playbook")


def run_site(module, replica, extra_args, log_name, timeout_s, book="site.yml"):
    """The replica's own site.yml (or another of the project's playbooks) from the project root: (ok, reason, log
    path)."""
    params = module.params
    log_path = os.path.join(params["log_dir"], f"{log_name}.log")
    command = [ansible_playbook(), book, "-i", replica["inventory"], *extra_args]
    with open(log_path, "w", encoding="utf-8") as log:
        try:
            rc = subprocess.run(
                command, cwd=params["project_dir"], stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s
            ).returncode
        except subprocess.TimeoutExpired:
            return False, f"its {book} ran over {timeout_s:.0f} s (log {log_path})", log_path
    if rc == 0:
        return True, "", log_path
    return False, f"{first_failure(log_path)} (log {log_path})", log_path


def changed_tasks(log_path):
    """The tasks a run changed (or, in check mode, would change), summed over its play recap's hosts."""
    with open(log_path, encoding="utf-8", errors="replace") as log:
        return sum(int(count) for count in re.findall(r"^\S+\s+: ok=\d+\s+changed=(\d+)", log.read(), re.M))


def alive_summary(log_path):
    """status.yml's verdict on the ranks ("all N rank(s) alive; head /health 200"), as its output shows it."""
    with open(log_path, encoding="utf-8", errors="replace") as log:
        found = re.search(r"all \d+ rank\(s\) alive[^\"\n]*", log.read())
    return found.group().strip() if found else ""


def first_failure(log_path):
    """The first failed task's name and message in a run's output, as the user would look for it."""
    task = ""
    with open(log_path, encoding="utf-8", errors="replace") as log:
        for line in log:
            if line.startswith("TASK ["):
                task = line.strip().removeprefix("TASK [").split("]")[0]
            if line.startswith(("fatal:", "failed:")):
                message = line.split("=>", 1)[-1].strip()
                with contextlib.suppress(ValueError):
                    message = json.loads(message).get("msg", message)
                return f"its site.yml failed at '{task}': {str(message)[:400]}"
    return "its site.yml failed"


class Http:
    """The router's admin API and the replicas' doors, over TLS verified with the fleet's CA."""

    def __init__(self, module):
        ca_file = module.params["ca_file"]
        self.context = ssl.create_default_context(cafile=ca_file) if ca_file else None
        self.router = (module.params["router_url"] or "").rstrip("/")
        self.admin_key = None
        if module.params["admin_key_file"]:
            with open(module.params["admin_key_file"], encoding="utf-8") as key:
                self.admin_key = key.read().strip()

    def call(self, method, url, timeout_s=HTTP_TIMEOUT_S):
        request = urllib.request.Request(url, method=method)
        if self.admin_key and url.startswith(f"{self.router}/"):  # the admin key goes to the router's door only
            request.add_header("Authorization", f"Bearer {self.admin_key}")
        with urllib.request.urlopen(request, timeout=timeout_s, context=self.context) as response:
            return response.status, response.read().decode("utf-8", "replace")

    def members(self):
        return json.loads(self.call("GET", f"{self.router}/list_workers")[1]).get("urls", [])

    def admin(self, action, url):
        try:
            # An add waits while the router checks the replica's /health (at most its 30 s worker startup timeout).
            timeout_s = 40 if action == "add_worker" else HTTP_TIMEOUT_S
            self.call("POST", f"{self.router}/{action}?url={urllib.parse.quote(url, safe='')}", timeout_s)
        except urllib.error.HTTPError as err:
            # Added meanwhile (its watchdog after a restart, or the router's own start): in rotation, as wanted.
            if not (action == "add_worker" and "already exists" in err.read().decode("utf-8", "replace")):
                raise

    def loads(self):
        workers = json.loads(self.call("GET", f"{self.router}/get_loads")[1]).get("workers", [])
        return {worker["worker"]: worker.get("load") for worker in workers}

    def health(self, url):
        try:
            return self.call("GET", f"{url.rstrip('/')}/health")[0]
        except urllib.error.HTTPError as err:
            return err.code
        except (urllib.error.URLError, OSError):
            return None

    def held(self, replica):
        try:
            return in_flight(read_metrics(replica["url"].rstrip("/"), None, HTTP_TIMEOUT_S, self.context))
        except ServerUnreachable:
            return None

    def serving(self, replica):
        return self.health(replica["url"]) == 200


def extra_vars_args(module, folder):
    if not module.params["replica_extra_vars"]:
        return []
    path = os.path.join(folder, "replica-extra-vars.json")
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as handle:
        json.dump(module.params["replica_extra_vars"], handle)
    return ["-e", f"@{path}"]


def validate(module, extra):
    refused = {}
    for replica in module.params["replicas"]:
        ok, reason, log_path = run_site(
            module, replica, ["--tags", "validate", *extra], f"{replica['name']}-validate", 600
        )
        if not ok:
            with open(log_path, encoding="utf-8", errors="replace") as log:
                refused[replica["name"]] = reason + "\n" + log.read()[-3000:]
    if refused:
        module.fail_json(
            msg="refused before any host changed: "
            + "; ".join(f"replica {name}: {text.splitlines()[0]}" for name, text in refused.items()),
            refused=refused,
        )
    heads = head_addresses(module)
    module.exit_json(changed=issue_certificates(module, extra), refused={}, heads=heads)


def issue_certificates(module, extra):
    """Every replica's door certificate issued on the controller (playbooks/door-certificate.yml, no node reached),
    so that the CA they share permits every replica's names before the router takes its copy; whether any run
    changed a file. Only when the run goes on to the router (I(certificates)), never in check mode."""
    changed = False
    wanted = module.params["certificates"] and not module.check_mode
    for replica in module.params["replicas"] if wanted else []:
        book = "playbooks/door-certificate.yml"
        ok, reason, log_path = run_site(module, replica, extra, f"{replica['name']}-certificate", 600, book)
        if not ok:
            module.fail_json(msg=f"replica {replica['name']}: its door certificate was not issued: {reason}")
        changed |= changed_tasks(log_path) > 0
    return changed


def head_addresses(module):
    """Each replica's head address as the controller resolves its door URL's host (the router lets it call the admin
    API); a name that does not resolve is refused naming the replica."""
    heads = {}
    for replica in module.params["replicas"]:
        host = urllib.parse.urlsplit(replica["url"]).hostname
        try:
            heads[replica["name"]] = socket.gethostbyname(host)
        except OSError as err:
            module.fail_json(msg=f"replica {replica['name']}: url={replica['url']}: {host} does not resolve ({err})")
    return heads


def replica_args(module, replica, extra, credentials):
    """A replica's run: the fleet's tags and variables, its URL as the router knows it (what its watchdog removes
    and adds back) and the credential that lets its head name that URL only at the router's admin API."""
    tags = ["--tags", ",".join(module.params["tags"])] if module.params["tags"] else []
    router = {"vllm_service_router_member": replica["url"]}
    if replica["name"] in credentials:
        router["vllm_service_router_credential_file"] = credentials[replica["name"]]
    return [*tags, *extra, "-e", json.dumps(router)]


def credential_files(module, folder):
    """{replica: a 0600 file in `folder` holding its head's credential at the router's door}, derived from the admin
    key (module_utils/door_keys.py); none without an admin key."""
    if not module.params["admin_key_file"]:
        return {}
    with open(module.params["admin_key_file"], encoding="utf-8") as key:
        admin_key = key.read()
    files = {}
    for replica in module.params["replicas"]:
        path = os.path.join(folder, f"router-credential-{replica['name']}")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as handle:
            handle.write(member_credential(admin_key, replica["url"]) + "\n")
        files[replica["name"]] = path
    return files


def preview(module, extra, credentials):
    """Check mode: each replica's site.yml --check --diff, the router untouched; fails after all, naming each."""
    rows = []
    for replica in module.params["replicas"]:
        args = ["--check", "--diff", *replica_args(module, replica, extra, credentials)]
        timeout_s = module.params["deploy_timeout_s"]
        ok, reason, log_path = run_site(module, replica, args, f"{replica['name']}-check", timeout_s)
        would_change = changed_tasks(log_path)
        rows.append(dict(name=replica["name"], url=replica["url"], would_change=would_change, ok=ok, problem=reason,
                         log=log_path))  # fmt: skip
    result = dict(changed=any(row["would_change"] for row in rows), preview=rows)
    failed = [f"replica {row['name']}: {row['problem']}" for row in rows if not row["ok"]]
    if failed:
        module.fail_json(msg="check mode: " + "; ".join(failed), **result)
    module.exit_json(**result)


def rollout(module, extra, credentials):
    http = Http(module)

    def deploy(replica):
        timeout_s = module.params["deploy_timeout_s"]
        args = replica_args(module, replica, extra, credentials)
        ok, reason, _ = run_site(module, replica, args, replica["name"], timeout_s)
        return ok, reason

    ops = FleetOps(
        members=http.members,
        remove=lambda url: http.admin("remove_worker", url),
        add=lambda url: http.admin("add_worker", url),
        held=http.held,
        serving=http.serving,
        deploy=deploy,
    )
    try:
        steps, problem = roll_out(ops, module.params["replicas"], module.params["drain_timeout_s"])
        members = http.members()
    except (urllib.error.URLError, OSError, ValueError) as err:
        module.fail_json(msg=f"the router at {http.router} did not answer its admin API: {err}")
    result = dict(changed=True, replicas=[step.as_dict() for step in steps], members=members)
    if problem:
        module.fail_json(msg=problem, **result)
    module.exit_json(**result)


def replica_status(module, http, replica, members):
    """One replica: in rotation, its door, and its own status.yml's verdict (its log kept beside the others)."""
    log_path = os.path.join(module.params["log_dir"], f"{replica['name']}-status.log")
    command = [ansible_playbook(), "playbooks/status.yml", "-i", replica["inventory"]]
    with open(log_path, "w", encoding="utf-8") as log:
        done = subprocess.run(
            command, cwd=module.params["project_dir"], stdout=log, stderr=subprocess.STDOUT, timeout=600
        )
    return dict(
        name=replica["name"],
        url=replica["url"],
        in_rotation=replica["url"] in members,
        health=http.health(replica["url"]),
        in_flight=http.held(replica),
        ok=done.returncode == 0,
        summary=alive_summary(log_path) if done.returncode == 0 else first_failure(log_path),
    )


def status(module):
    """The router's view beside each replica's door and its own status.yml; fails after reporting every one."""
    http = Http(module)
    router = {"health": http.health(http.router), "members": None, "loads": {}}
    try:
        router.update(members=http.members(), loads=http.loads())
    except (urllib.error.URLError, OSError, ValueError) as err:
        router["error"] = str(getattr(err, "reason", err))
    replicas = [replica_status(module, http, r, router["members"] or []) for r in module.params["replicas"]]
    unwell = [r["name"] for r in replicas if not (r["ok"] and r["in_rotation"])]
    result = dict(changed=False, router=router, status=replicas)
    if router["members"] is None:
        module.fail_json(msg=f"the router at {http.router} did not answer its admin API: {router['error']}", **result)
    if unwell:
        module.fail_json(msg=f"not well or out of rotation: {', '.join(unwell)}", **result)
    module.exit_json(**result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            mode=dict(type="str", choices=["validate", "rollout", "status"], default="rollout"),
            replicas=dict(type="list", elements="dict", required=True),
            router_url=dict(type="str"),
            ca_file=dict(type="path"),
            admin_key_file=dict(type="path", default=""),
            project_dir=dict(type="path", required=True),
            log_dir=dict(type="path", required=True),
            tags=dict(type="list", elements="str", default=[]),
            replica_extra_vars=dict(type="dict", default={}),
            drain_timeout_s=dict(type="float", default=300),
            deploy_timeout_s=dict(type="float", default=3600),
            certificates=dict(type="bool", default=False),
        ),
        required_if=[("mode", "rollout", ("router_url", "ca_file")), ("mode", "status", ("router_url", "ca_file"))],
        supports_check_mode=True,
    )
    problems = replica_problems(module.params["replicas"], module.params["project_dir"])
    if problems:
        module.fail_json(msg="; ".join(problems) + "; nothing was changed", problems=problems)
    os.makedirs(module.params["log_dir"], exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="spark-fleet-") as folder:
        extra = extra_vars_args(module, folder)
        if module.params["mode"] == "validate":
            validate(module, extra)
        if module.params["mode"] == "status":
            status(module)
        credentials = credential_files(module, folder)
        if module.check_mode:
            preview(module, extra, credentials)
        rollout(module, extra, credentials)


if __name__ == "__main__":
    main()
