"""Simulation: 8-16 Sparks as replicas (pairs or quads) behind a router, and what the routing policy does to the
prefix cache. A model with stated assumptions, not a measurement: no engine runs.

Each coding-agent session sends turns whose prompt is the previous prompt plus new tokens; a replica's prefix cache
holds the sessions it served last (LRU, capacity in tokens) and a hit covers whole blocks of the shared prefix only
(the hybrid block, 832 tokens on `pair`/`quad` with MTP 3). Halfway through, one replica fails and its sessions
go elsewhere. Printed per policy: the prompt tokens served from cache before and after the failure, the sessions
that moved, and the busiest replica's prefill load against the mean.

    python tests/bench/replica_router_sim.py [--replicas 4] [--sessions 24] [--turns 40]
"""

import argparse
import hashlib
import random
from collections import OrderedDict

BLOCK = 832
FIRST_PROMPT, TURN_TOKENS = 24_000, 1_500  # an agent's system prompt + repository context, then each turn's growth
CACHE_TOKENS = 1_000_000  # prefix cache per replica (order of magnitude of a Spark pair's KV pool at util 0.70)


def stable_hash(text):
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


class Replica:
    def __init__(self):
        self.cache = OrderedDict()  # session -> cached prefix length (tokens), least recently used first
        self.prefill = 0

    def serve(self, session, prompt):
        cached = min(self.cache.pop(session, 0), prompt) // BLOCK * BLOCK
        self.prefill += prompt - cached
        self.cache[session] = prompt
        while sum(self.cache.values()) > CACHE_TOKENS and len(self.cache) > 1:
            self.cache.popitem(last=False)
        return cached


def rendezvous(session, alive):
    """Highest-random-weight hashing: a failed replica moves only its own sessions."""
    return max(alive, key=lambda replica: stable_hash(f"{session}/{replica}"))


def modulo(session, alive):
    """hash(session) mod live replicas (HAProxy's map-based hashing): a failure reshuffles most sessions."""
    return alive[stable_hash(session) % len(alive)]


def policies(rng):
    turn = {"n": 0}

    def round_robin(_session, alive):
        turn["n"] += 1
        return alive[turn["n"] % len(alive)]

    return {
        "round robin": round_robin,
        "random (least-loaded proxy)": lambda _session, alive: rng.choice(alive),
        "session hash mod N": modulo,
        "session rendezvous hash": rendezvous,
    }


def simulate(route, replicas, sessions, turns, rng):
    fleet = {name: Replica() for name in range(replicas)}
    alive = list(fleet)
    halves = [[0, 0], [0, 0]]  # [cached, prompt] before / after the failure
    home, moved = {}, set()
    for step in range(turns):
        if step == turns // 2:
            alive.remove(alive[-1])
        for number in rng.sample(range(sessions), sessions):  # agents do not arrive in a fixed order
            session = f"session-{number}"
            prompt = FIRST_PROMPT + step * TURN_TOKENS
            target = route(session, alive)
            if step >= turns // 2 and home.get(session) not in (None, target):
                moved.add(session)
            home[session] = target
            half = halves[step >= turns // 2]
            half[0] += fleet[target].serve(session, prompt)
            half[1] += prompt
    loads = [fleet[name].prefill for name in alive]
    return {
        "hit_before": halves[0][0] / halves[0][1],
        "hit_after": halves[1][0] / halves[1][1],
        "moved": len(moved),
        "imbalance": max(loads) / (sum(loads) / len(loads)),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--sessions", type=int, default=24)
    parser.add_argument("--turns", type=int, default=40)
    args = parser.parse_args()
    print(
        f"{args.replicas} replicas, {args.sessions} sessions x {args.turns} turns, block {BLOCK}, "
        f"cache {CACHE_TOKENS} tokens per replica; one replica fails after turn {args.turns // 2}"
    )
    print(f"{'policy':30} {'hit before':>10} {'hit after':>10} {'moved':>6} {'max/mean prefill':>17}")
    for name, route in policies(random.Random(0)).items():
        r = simulate(route, args.replicas, args.sessions, args.turns, random.Random(1))
        print(f"{name:30} {r['hit_before']:10.2f} {r['hit_after']:10.2f} {r['moved']:6d} {r['imbalance']:17.2f}")


if __name__ == "__main__":
    main()
