"""tests/bench/replica_router_sim.py: the routing model behind docs/clusters.md's plan for 8-16 Sparks."""

import random

from tests.bench import replica_router_sim as sim


def run(policy, replicas=4, sessions=24):
    route = sim.policies(random.Random(0))[policy]
    return sim.simulate(route, replicas, sessions, 20, random.Random(1))


def test_session_affinity_keeps_the_prefix_cache_that_spraying_requests_loses():
    assert run("session rendezvous hash")["hit_before"] > run("round robin")["hit_before"] + 0.1


def test_a_failed_replica_moves_only_its_own_sessions_under_rendezvous_hashing():
    rendezvous, modulo = run("session rendezvous hash", 8, 48), run("session hash mod N", 8, 48)
    assert rendezvous["moved"] < modulo["moved"] / 2, (rendezvous, modulo)


def test_a_hit_covers_whole_blocks_only():
    replica = sim.Replica()
    assert replica.serve("s", sim.BLOCK + 100) == 0
    assert replica.serve("s", 3 * sim.BLOCK) == sim.BLOCK
