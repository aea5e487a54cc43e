"""A fleet's rolling update: one replica at a time out of the router, drained, deployed, gated, and back in.

No Ansible imports: the procedure takes its effects (the router's admin API, a replica's door, the replica's own
site.yml run) as a `FleetOps` object, so plain pytest drives it with fakes and the module with the real ones.
"""

import os
import time
from dataclasses import dataclass, field

# vLLM's gauges of the requests a replica still holds (running or queued); a drained replica reports 0 for both.
IN_FLIGHT_GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting")


def in_flight(metrics):
    """Requests a replica holds, from its parsed /metrics ({name: value}); None when it reports neither gauge."""
    values = [metrics[name] for name in IN_FLIGHT_GAUGES if name in metrics]
    return int(sum(values)) if values else None


def replica_problems(replicas, project_dir):
    """Every problem with the fleet's replica list at once (each names the replica, the value and the rule)."""
    problems, names = [], []
    for index, replica in enumerate(replicas):
        name = replica.get("name") if isinstance(replica, dict) else None
        where = f"replica {name}" if name else f"spark_fleet_replicas[{index}]"
        if not isinstance(replica, dict) or not name:
            problems.append(f"{where}: {replica!r} has no name (rule: each replica has name, inventory and url)")
            continue
        names.append(name)
        inventory = str(replica.get("inventory") or "")
        if not os.path.isdir(os.path.join(project_dir, inventory)) or not inventory:
            problems.append(
                f"{where}: inventory={inventory!r} is no inventory folder under {project_dir} (rule: each "
                "replica is an inventory of its own, with its own profile and records)"
            )
        url = str(replica.get("url") or "")
        if not url.startswith(("https://", "http://")):
            problems.append(
                f"{where}: url={url!r} is not its door (rule: http(s)://<head>:<port>, as the router reaches it)"
            )
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        problems.append(f"replica names {', '.join(repeated)} repeat (rule: each replica has its own name and log)")
    return problems


@dataclass
class ReplicaStep:
    """What the rollout did to one replica, as the module returns it."""

    name: str
    url: str
    was_member: bool
    drained_s: float = 0.0
    left_in_flight: int = 0
    deploy_s: float = 0.0
    deployed: bool = False
    serving: bool = False
    back_in_rotation: bool = False
    problem: str = ""

    def as_dict(self):
        return dict(self.__dict__)


@dataclass
class FleetOps:
    """The rollout's effects; every callable takes a replica dict (name, inventory, url) or a URL."""

    members: object  # () -> [url] the router routes to now
    remove: object  # (url) -> None
    add: object  # (url) -> None
    held: object  # (replica) -> int | None: requests it still holds (None: unknown)
    serving: object  # (replica) -> bool: its door's /health answers 200
    deploy: object  # (replica) -> (ok, reason)
    clock: object = time.monotonic
    sleep: object = time.sleep
    poll_s: float = 1.0
    steps: list = field(default_factory=list)


def drain(ops, replica, timeout_s):
    """Wait (bounded) until the replica, out of rotation, holds no request: (seconds waited, requests left). A replica
    whose door does not answer holds none a client could still get."""
    started = ops.clock()
    left = None
    for _ in range(int(timeout_s / ops.poll_s) + 1):
        left = ops.held(replica)
        if not left or ops.clock() - started >= timeout_s:
            break
        ops.sleep(ops.poll_s)
    return round(ops.clock() - started, 1), left or 0


def roll_out(ops, replicas, drain_timeout_s):
    """Every replica in turn; stops at the first that fails, naming it. Returns (steps, problem or '')."""
    steps = []
    for index, replica in enumerate(replicas):
        step = update_one(ops, replica, drain_timeout_s)
        steps.append(step)
        if step.problem:
            rest = [r["name"] for r in replicas[index + 1 :]]
            untouched = f"; not touched: {', '.join(rest)}" if rest else ""
            return steps, f"replica {replica['name']}: {step.problem}; the rollout stopped there{untouched}"
    return steps, ""


def update_one(ops, replica, drain_timeout_s):
    url = replica["url"]
    step = ReplicaStep(name=replica["name"], url=url, was_member=url in ops.members())
    if step.was_member:
        ops.remove(url)
        step.drained_s, step.left_in_flight = drain(ops, replica, drain_timeout_s)
    started = ops.clock()
    step.deployed, reason = ops.deploy(replica)
    step.deploy_s = round(ops.clock() - started, 1)
    step.serving = ops.serving(replica)
    if step.serving:
        ops.add(url)
        step.back_in_rotation = True
    if not step.deployed:
        where = (
            "it serves its previous deployment and is back in rotation"
            if step.serving
            else "it does not serve and stays out of the router"
        )
        step.problem = f"{reason} ({where})"
    elif not step.serving:
        step.problem = "deployed, but its door's /health does not answer 200; it stays out of the router"
    return step
