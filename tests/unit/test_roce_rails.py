"""Every node's RoCE rails judged together (module_utils/roce_rails.py, module roce_rails): the twin's netdev and
address per host, every violation of every node listed at once, each naming the host, the variable, its value and
the rule; and each node's DF ping targets on every rail."""

import copy

import pytest
from ansible.module_utils.roce_rails import judge
from ansible.modules import roce_rails

from tests.module_harness import run_module

INTERFACES = {"roceP2p1s0f1": "enP2p1s0f1np1", "roceP2p1s0f0": "enP2p1s0f0np0"}


def node(name, index, **changes):
    """A Spark of the shipped pair: 192.168.100.1x on its first rail, 192.168.200.1x on its twin."""
    return {
        "node": name,
        "address": f"192.168.100.{10 + index}",
        "prefix_length": 24,
        "interface": "enp1s0f1np1",
        "rdma_device": "rocep1s0f1",
        "rdma_port": 1,
        "twins": ["roceP2p1s0f1:1"],
        "twin_addresses": {"roceP2p1s0f1": f"192.168.200.{10 + index}"},
        "twin_interfaces": INTERFACES,
        "peers": [],
        **changes,
    }


def pair(**changes_of_b):
    nodes = [node("spark-a", 0), node("spark-b", 1, **changes_of_b)]
    for this in nodes:
        this["peers"] = [{"name": other["node"], "address": other["address"]} for other in nodes if other is not this]
    return nodes


def test_a_good_pair_has_two_rails_each_and_pings_every_rail_of_its_peer():
    result = judge(pair())
    assert result["problems"] == [] and result["node_problems"] == {"spark-a": [], "spark-b": []}
    assert result["rails"]["spark-a"] == [
        {"device": "rocep1s0f1", "port": "1", "interface": "enp1s0f1np1", "address": "192.168.100.10"},
        {"device": "roceP2p1s0f1", "port": "1", "interface": "enP2p1s0f1np1", "address": "192.168.200.10"},
    ]
    assert result["targets"]["spark-a"] == [
        {"peer": "spark-b", "rail": "rocep1s0f1", "interface": "enp1s0f1np1", "address": "192.168.100.11"},
        {"peer": "spark-b", "rail": "roceP2p1s0f1", "interface": "enP2p1s0f1np1", "address": "192.168.200.11"},
    ]


RULE_TWIN_ADDRESS = (
    "(rule: every twin of roce_network_nccl_ib_hca_twins gets an address of its own on enP2p1s0f1np1, on a subnet of "
    "its own, under the host in hosts.yml: roce_network_twin_addresses: {roceP2p1s0f1: 192.168.200.10})"
)


@pytest.mark.parametrize(
    ("fault", "changes_of_b", "problems"),
    [
        (
            "no address for the twin",
            {"twin_addresses": {}},
            [f"spark-b: roce_network_twin_addresses has no address for roceP2p1s0f1 {RULE_TWIN_ADDRESS}"],
        ),
        (
            "the address under another device's name",
            {"twin_addresses": {"roceP2p1s0f0": "192.168.200.11"}},
            [
                "spark-b: roce_network_twin_addresses has no address for roceP2p1s0f1 (it names roceP2p1s0f0) "
                f"{RULE_TWIN_ADDRESS}"
            ],
        ),
        (
            "a list, not a mapping",
            {"twin_addresses": ["192.168.200.11"]},
            [
                "spark-b: roce_network_twin_addresses=['192.168.200.11'] is not a mapping (rule: one address per twin "
                "RDMA device, e.g. roce_network_twin_addresses: {roceP2p1s0f1: 192.168.200.10})",
                f"spark-b: roce_network_twin_addresses has no address for roceP2p1s0f1 {RULE_TWIN_ADDRESS}",
            ],
        ),
        (
            "not an IPv4 address",
            {"twin_addresses": {"roceP2p1s0f1": "192.168.200.300"}},
            [
                "spark-b: roce_network_twin_addresses.roceP2p1s0f1=192.168.200.300 is not an IPv4 address (rule: a "
                "bare dotted quad, as roce_network_address)"
            ],
        ),
        (
            "the first rail's subnet",
            {"twin_addresses": {"roceP2p1s0f1": "192.168.100.21"}},
            [
                "spark-b: roce_network_twin_addresses.roceP2p1s0f1=192.168.100.21 is on 192.168.100.0/24, the subnet "
                "of roce_network_address 192.168.100.11 (rule: each rail of a node on a subnet of its own: two "
                "netdevs on one subnet share one route, and the twin's traffic would leave by the other netdev)"
            ],
        ),
        (
            "another subnet than the peer's on the same rail",
            {"twin_addresses": {"roceP2p1s0f1": "192.168.201.11"}},
            [
                "spark-b: roce_network_twin_addresses.roceP2p1s0f1=192.168.201.11/24 is not on spark-a's subnet "
                "192.168.200.0/24 of rail roceP2p1s0f1 (rule: the nodes reach each other on a rail over one subnet)"
            ],
        ),
        (
            "the peer's address on the rail",
            {"twin_addresses": {"roceP2p1s0f1": "192.168.200.10"}},
            [
                "spark-b: roce_network_twin_addresses.roceP2p1s0f1=192.168.200.10 is also spark-a's (rule: one address "
                "per node on a rail)"
            ],
        ),
        (
            "no netdev known for the twin's device",
            {"twin_interfaces": {}},
            [
                "spark-b: roce_network_twin_interfaces has no netdev for roceP2p1s0f1 (rule: the twin's address goes "
                "on its netdev, the one ibdev2netdev shows as roceP2p1s0f1 port 1 ==> <netdev>)"
            ],
        ),
        (
            "a twin entry without its port, so other twins than the peer's",
            {"twins": ["roceP2p1s0f1"]},
            [
                'spark-b: roce_network_nccl_ib_hca_twins entry "roceP2p1s0f1" is not "device:port" (rule: an '
                "NCCL_IB_HCA entry, e.g. roceP2p1s0f1:1)",
                "spark-b: roce_network_nccl_ib_hca_twins ['roceP2p1s0f1'] differs from spark-a's ['roceP2p1s0f1:1'] "
                "(rule: every node runs the same rails, each measured between every pair of nodes)",
            ],
        ),
        (
            "one rail on one node only",
            {"twins": []},
            [
                "spark-b: roce_network_nccl_ib_hca_twins [] differs from spark-a's ['roceP2p1s0f1:1'] (rule: every "
                "node runs the same rails, each measured between every pair of nodes)"
            ],
        ),
    ],
)
def test_each_rule_names_the_host_the_variable_the_value_and_the_rule(fault, changes_of_b, problems):
    result = judge(pair(**changes_of_b))
    assert result["problems"] == problems, fault
    assert result["node_problems"] == {"spark-a": [], "spark-b": problems}


def test_one_rail_alone_needs_no_address_and_an_unused_one_is_left_alone():
    """`roce_network_nccl_ib_hca_twins: []` runs on the first rail alone, whatever hosts.yml still gives the twin."""
    nodes = [node(name, index, twins=[]) for index, name in enumerate(("spark-a", "spark-b"))]
    nodes[1]["twin_addresses"] = {}
    result = judge(nodes)
    assert result["problems"] == [] and [len(rails) for rails in result["rails"].values()] == [1, 1]


def test_every_violation_of_every_node_is_listed_at_once_in_node_order():
    quad = [node(f"spark-{letter}", index) for index, letter in enumerate("abcd")]
    quad[1]["twin_addresses"] = {}
    quad[2]["twin_addresses"] = {"roceP2p1s0f1": "192.168.100.30"}
    quad[3]["twin_addresses"] = {"roceP2p1s0f1": "192.168.200.10"}
    problems = judge(quad)["problems"]
    assert [problem.split(" (")[0] for problem in problems] == [
        "spark-b: roce_network_twin_addresses has no address for roceP2p1s0f1",
        "spark-c: roce_network_twin_addresses.roceP2p1s0f1=192.168.100.30 is on 192.168.100.0/24, the subnet of "
        "roce_network_address 192.168.100.12",
        "spark-d: roce_network_twin_addresses.roceP2p1s0f1=192.168.200.10 is also spark-a's",
    ]


def test_a_twin_without_a_good_address_keeps_its_rail_so_its_port_and_netdev_are_still_checked():
    rails = judge(pair(twin_addresses={}))["rails"]["spark-b"]
    assert rails[1] == {"device": "roceP2p1s0f1", "port": "1", "interface": "enP2p1s0f1np1", "address": None}


def test_a_peer_outside_the_play_is_pinged_on_the_first_rail_at_its_inventory_address():
    nodes = pair()
    nodes[0]["peers"].append({"name": "spark-z", "address": "192.168.100.30"})
    targets = judge(nodes)["targets"]["spark-a"]
    assert [(t["peer"], t["rail"], t["address"]) for t in targets] == [
        ("spark-b", "rocep1s0f1", "192.168.100.11"),
        ("spark-b", "roceP2p1s0f1", "192.168.200.11"),
        ("spark-z", "rocep1s0f1", "192.168.100.30"),
    ]


def test_the_module_returns_every_nodes_rails_targets_and_problems():
    nodes = pair(twin_addresses={})
    result = run_module(roce_rails, {"nodes": copy.deepcopy(nodes)})
    assert not result["failed"] and not result["changed"], result
    assert result == dict(result, **judge(nodes))
