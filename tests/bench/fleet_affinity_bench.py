"""Benchmark: the prefix-cache hit ratio of multi-turn sessions through the fleet's router (consistent hash on
X-Session-ID), sent straight to one replica, and through a round-robin router, beside the simulation's prediction.

Needs the test-bed fleet served (`ansible-playbook site.yml -i inventories/testbed-fleet`, or test_fleet.py's
fixture). For the contrast it starts a second router on the router host for the run only: the same installed
vllm-router with `--policy round_robin`, listening on the router host's test-bed address (port 30001, plain HTTP,
the key forwarded as for the real one); it is stopped at the end. Each pass uses its own sessions, so no pass finds
another's conversations in a cache. The hit ratio is the share of prompt tokens served from the prefix cache over
every turn (vLLM's `cached_tokens`). Beside each: tests/bench/replica_router_sim.py's prediction for 2 replicas with
its assumptions corrected to what was measured here (the first prompt, each turn's growth, the engine's block).

    python tests/bench/fleet_affinity_bench.py [--sessions 8] [--turns 6]
"""

import argparse
import random
import sys
import time
import urllib.error
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tests.bench import replica_router_sim as sim
from tests.testbed.fleet_load import question, stream_chat
from tests.testbed.helpers import INSTANCE, node_exec

NET = f"10.253.{16 * int(INSTANCE)}"
ROUTER = f"https://{NET}.12:8443"
DIRECT = f"https://{NET}.10:8443"
ROUND_ROBIN_PORT = 30001
FLEET_DIR = ROOT / ".testbed" / INSTANCE / "fleet"
CA, KEY = FLEET_DIR / "front-door" / "ca.pem", FLEET_DIR / "api-key"
ROUTER_NODE = 2
BLOCK = 16  # the tiny model's KV-cache block on the CPU engine (its prefix hits come in whole blocks of 16)


def start_round_robin_router():
    """The installed router again, round robin, on the router host's test-bed address: (its URL, its pid)."""
    command = (
        "SSL_CERT_FILE=/etc/spark-serve/router/replicas-ca.pem nohup /opt/spark-serve/router/bin/vllm-router "
        f"--host {NET}.12 --port {ROUND_ROBIN_PORT} --policy round_robin --prometheus-port 29001 "
        f"--worker-urls {DIRECT} https://{NET}.11:8443 >/tmp/bench-router.out 2>&1 </dev/null & echo $!"
    )
    rc, pid = node_exec(ROUTER_NODE, command)
    assert rc == 0, pid
    url = f"http://{NET}.12:{ROUND_ROBIN_PORT}"
    rc, out = node_exec(ROUTER_NODE, f"for i in $(seq 60); do curl -sf {url}/list_workers && exit 0; sleep 1; done")
    assert rc == 0, f"the round-robin router did not start: {out}"
    return url, pid.strip()


def conversation(url, key, name, turns):
    """[(cached, prompt)] tokens of each turn of one conversation."""
    messages, sent = [], []
    for turn in range(turns):
        messages.append({"role": "user", "content": question(name, turn, words=24)})
        try:
            answer = stream_chat(url, key, str(CA), name, messages)
        except urllib.error.HTTPError as err:
            raise SystemExit(f"{url}, session {name}, turn {turn}: HTTP {err.code} {err.read()[:300]!r}") from err
        sent.append((answer.cached_tokens, answer.prompt_tokens))
        messages.append({"role": "assistant", "content": "ok"})
    return sent


def conversations(url, key, label, sessions, turns):
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(lambda n: conversation(url, key, f"{label}{n}", turns), range(sessions)))


def hit_ratio(runs):
    turns = [turn for run in runs for turn in run]
    return sum(c for c, _ in turns) / max(1, sum(p for _, p in turns))


def simulated(runs, sessions, turns):
    """The simulation's hit ratio for 2 replicas (no failure: its first half), its prompt sizes set to these."""
    sim.BLOCK, sim.FIRST_PROMPT = BLOCK, sum(run[0][1] for run in runs) // len(runs)
    sim.TURN_TOKENS = sum(run[-1][1] - run[0][1] for run in runs) // len(runs) // max(1, turns - 1)
    routes = sim.policies(random.Random(0))
    predict = {
        label: sim.simulate(routes[name], 2, sessions, 2 * turns, random.Random(1))["hit_before"]
        for label, name in (
            ("router, consistent hash", "session rendezvous hash"),
            ("router, round robin", "round robin"),
        )
    }
    predict["straight to one replica"] = predict["router, consistent hash"]  # one cache per session either way
    return predict


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--turns", type=int, default=6)  # about 200 tokens a turn: six fit 2048
    args = parser.parse_args()
    key = KEY.read_text().strip()
    round_robin, pid = start_round_robin_router()
    stamp = int(time.time()) % 1000  # new sessions each run (short names: fewer tokens a turn)
    try:
        runs = {
            "router, consistent hash": conversations(ROUTER, key, f"h{stamp}-", args.sessions, args.turns),
            "straight to one replica": conversations(DIRECT, key, f"d{stamp}-", args.sessions, args.turns),
            "router, round robin": conversations(round_robin, key, f"r{stamp}-", args.sessions, args.turns),
        }
    finally:
        node_exec(ROUTER_NODE, f"kill {pid}; true")
    measured = {label: hit_ratio(run) for label, run in runs.items()}
    predicted = simulated(runs["straight to one replica"], args.sessions, args.turns)
    print(
        f"{args.sessions} sessions x {args.turns} turns, 2 single-node replicas of the tiny model; simulated with a "
        f"first prompt of {sim.FIRST_PROMPT} tokens, {sim.TURN_TOKENS} more each turn, block {sim.BLOCK}"
    )
    print(f"{'pass':28} {'hit ratio':>10} {'vs direct':>10} {'simulated':>10}")
    for label, ratio in measured.items():
        print(f"{label:28} {ratio:10.2f} {ratio / measured['straight to one replica']:10.2f} {predicted[label]:10.2f}")


if __name__ == "__main__":
    main()
