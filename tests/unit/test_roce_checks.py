"""roles/roce_network's judgement (module_utils/roce_checks.py) and its module roce_link, run against a sysfs tree
laid out as a CX-7's: every problem is found at once, named by node, value and what was expected."""

import pytest
from ansible.module_utils.roce_checks import (
    Link,
    bandwidth_problems,
    bw_average_gbps,
    gid_indexes,
    ipv4_address,
    ipv4_gid,
    subnet,
)
from ansible.modules import roce_bandwidth, roce_link

from tests.module_harness import run_module

GID = "0000:0000:0000:0000:0000:ffff:c0a8:640a"  # 192.168.100.10
LIVE = {"before": {"mtu": 9000, "up": True, "ipv4": ["192.168.100.10/24"]}}


def settings(tmp_path, **changes):
    return {
        "node": "node-0",
        "address": "192.168.100.10",
        "prefix_length": 24,
        "mtu": 9000,
        "interface": "enp1s0f1np1",
        "rdma_device": "rocep1s0f1",
        "rdma_port": 1,
        "sysfs_root": str(tmp_path),
        "hcas": ["rocep1s0f1:1", "roceP2p1s0f1:1"],
        **changes,
    }


def write_port(root, device, state="4: ACTIVE", gids=None):
    """A port directory: its state, and {index: (gid, type)} in gids/ and gid_attrs/types/."""
    port = root / "class" / "infiniband" / device / "ports" / "1"
    (port / "gids").mkdir(parents=True)
    (port / "gid_attrs" / "types").mkdir(parents=True)
    (port / "state").write_text(state + "\n")
    for index, (gid, kind) in (gids or {}).items():
        (port / "gids" / str(index)).write_text(gid + "\n")
        (port / "gid_attrs" / "types" / str(index)).write_text(kind + "\n")


def judge(tmp_path, stage, **args):
    result = run_module(roce_link, {"stage": stage, "link": settings(tmp_path, **args.pop("link", {})), **args})
    assert not result["failed"], result
    return result


@pytest.fixture()
def cx7(tmp_path):
    """Both rails ACTIVE; the address's GID at index 3 as RoCE v2 (index 2: the same GID as RoCE v1)."""
    write_port(tmp_path, "rocep1s0f1", gids={2: (GID, "IB/RoCE v1"), 3: (GID, "RoCE v2")})
    write_port(tmp_path, "roceP2p1s0f1", gids={3: ("0000:0000:0000:0000:0000:ffff:c0a8:650a", "RoCE v2")})
    return tmp_path


def test_a_healthy_link_has_no_problem_and_names_its_gid_index(cx7):
    result = judge(cx7, "verify", netdev=LIVE, pings=[{"item": "node-1", "rc": 0, "cmd": ["ping", "192.168.100.11"]}])
    assert result["problems"] == []
    assert (result["ready"], result["gid"], result["gid_index"], result["subnet"]) == (True, GID, 3, "192.168.100.0/24")


def test_verify_lists_every_live_problem_at_once(cx7):
    write_port(cx7, "rocep1s0f9", state="1: DOWN")
    (cx7 / "class/infiniband/roceP2p1s0f1/ports/1/gid_attrs/types/3").write_text("IB/RoCE v1\n")
    ping = {
        "item": "node-1",
        "rc": 1,
        "cmd": ["ping", "-M", "do", "192.168.100.11"],
        "stderr_lines": ["ping: sendmsg: Message too long", "ping: sendmsg: Message too long"],
        "stdout_lines": ["PING x", "3 packets transmitted, 0 received, 100% packet loss, time 402ms"],
    }
    result = judge(
        cx7,
        "verify",
        link={"hcas": ["rocep1s0f1:1", "roceP2p1s0f1:1", "rocep1s0f9:1"]},
        netdev={"before": {"mtu": 1500, "up": False, "ipv4": []}},
        pings=[ping],
    )
    assert result["problems"] == [
        "node-0: enp1s0f1np1 live MTU is 1500, expected 9000",
        "node-0: enp1s0f1np1 is administratively down, expected up",
        "node-0: enp1s0f1np1 live IPv4 is none, expected 192.168.100.10/24",
        f'node-0: RDMA port rocep1s0f9/1 is DOWN ({cx7}/class/infiniband/rocep1s0f9/ports/1/state = "1: DOWN"), '
        "expected ACTIVE",
        "node-0: rail roceP2p1s0f1/1 has no RoCE v2 GID at index 3 (gids/3 = "
        "0000:0000:0000:0000:0000:ffff:c0a8:650a, type IB/RoCE v1), the NCCL_IB_GID_INDEX of rocep1s0f1: give its "
        "netdev an address on the fabric",
        "node-0: rail rocep1s0f9/1 has no RoCE v2 GID at index 3 (gids/3 = none, type none), the NCCL_IB_GID_INDEX of "
        "rocep1s0f1: give its netdev an address on the fabric",
        "node-0: DF ping at MTU 9000 (8972-byte payload, -M do) to node-1 192.168.100.11 failed: ping: sendmsg: "
        "Message too long; 3 packets transmitted, 0 received, 100% packet loss, time 402ms; both ends and the link "
        "need MTU 9000",
    ]
    assert result["ready"] is False


def test_an_address_without_its_roce_v2_gid_is_named(cx7):
    result = judge(cx7, "verify", link={"address": "192.168.100.20"}, netdev=LIVE)
    assert result["gid_index"] is None and not result["ready"]
    assert result["problems"][-1] == (
        "node-0: no RoCE v2 GID 0000:0000:0000:0000:0000:ffff:c0a8:6414 (192.168.100.20) on RDMA port rocep1s0f1/1 "
        f"({cx7}/class/infiniband/rocep1s0f1/ports/1/gids, gid_attrs/types): is the address on enp1s0f1np1 and is "
        "rocep1s0f1 its RDMA device?"
    )


def test_precheck_lists_inputs_netdev_port_netplan_and_peers_at_once(tmp_path):
    write_port(tmp_path, "rocep1s0f1")  # no GID table entries
    peers = [
        {"name": "node-1", "address": "10.0.0.1", "link": {"address": "10.0.0.1", "prefix_length": 24, "mtu": 1500}},
        {"name": "node-2", "address": None, "link": None},
    ]
    result = judge(
        tmp_path,
        "precheck",
        link={"hcas": ["rocep1s0f1:1", "rocep1s0f2"], "prefix_length": 33, "mtu": "jumbo"},
        netdev={"msg": "netdev enp1s0f1np1 not found: Device does not exist."},
        netplan_command=str(tmp_path / "netplan"),
        peers=peers,
    )
    assert result["problems"] == [
        "node-0: roce_network_prefix_length=33, expected 1..32",
        "node-0: roce_network_mtu=jumbo, expected an integer >= 1280 (9000 on the CX-7 link)",
        'node-0: NCCL_IB_HCA entry "rocep1s0f2" (roce_network_nccl_ib_hca/_twins) is not "device:port"',
        "node-0: roce_network_interface netdev enp1s0f1np1 not found: Device does not exist.",
        f"node-0: no GID table in {tmp_path}/class/infiniband/rocep1s0f1/ports/1/gids (RDMA device rocep1s0f1 port 1)",
        f"node-0: {tmp_path}/netplan not found (roce_network_netplan_apply is true; false on nodes without netplan)",
        "node-0: roce_network_address 192.168.100.10/33 and node-1's 10.0.0.1/24 are not on one subnet",
        "node-0: roce_network_mtu jumbo differs from node-1's 1500 (both ends of the link need the same MTU)",
        "node-0: peer node-2 has no roce_network_address in the inventory",
    ]


def test_precheck_reads_a_down_port_only_once_its_netdev_is_up(tmp_path):
    write_port(tmp_path, "rocep1s0f1", state="1: DOWN", gids={3: (GID, "RoCE v2")})
    down = {"before": {"mtu": 1500, "up": False, "ipv4": []}}
    args = {"link": {"hcas": ["rocep1s0f1:1"]}, "netdev": down}
    assert judge(tmp_path, "precheck", **args)["problems"] == []
    problems = judge(tmp_path, "precheck", **dict(args, netdev=LIVE))["problems"]
    assert [p.split(" (")[0] for p in problems] == ["node-0: RDMA port rocep1s0f1/1 is DOWN"]


def test_a_missing_port_and_a_peer_with_the_same_address_are_named(tmp_path):
    peer = {
        "name": "node-1",
        "address": "192.168.100.10",
        "link": {"address": "192.168.100.10", "prefix_length": 24, "mtu": 9000},
    }
    problems = judge(tmp_path, "precheck", link={"hcas": ["rocep1s0f1:1"]}, netdev=LIVE, peers=[peer])["problems"]
    assert problems == [
        f"node-0: RDMA port rocep1s0f1/1 not found (no {tmp_path}/class/infiniband/rocep1s0f1/ports/1/state; check "
        "roce_network_rdma_device and roce_network_sysfs_root)",
        "node-0: roce_network_address 192.168.100.10 is also node-1's",
    ]


@pytest.mark.parametrize("value", ["192.168.100", "192.168.100.10/24", "3232261130", "192.168.100.256", " 1.2.3.4"])
def test_only_a_bare_dotted_quad_is_an_address(value, tmp_path):
    assert ipv4_address(value) is None
    assert subnet(value, 24) is None
    problems = judge(tmp_path, "precheck", link={"address": value, "hcas": ["x:1"]}, netdev=LIVE)["problems"]
    assert f"node-0: roce_network_address={value} is not an IPv4 address" in problems


def test_the_gid_is_the_ipv4_mapped_address_and_only_roce_v2_entries_count(tmp_path):
    assert ipv4_gid("192.168.100.10") == GID
    link = Link(settings(tmp_path))
    sysfs = {
        f"{link.port_dir}/gids/1": GID,
        f"{link.port_dir}/gid_attrs/types/1": "IB/RoCE v1",
        f"{link.port_dir}/gids/7": GID,
        f"{link.port_dir}/gid_attrs/types/7": "RoCE v2",
        f"{link.port_dir}/gids/5": GID,
        f"{link.port_dir}/gid_attrs/types/5": "RoCE v2",
    }
    assert gid_indexes(sysfs, link.port_dir, GID) == [5, 7]


# perftest's summary table as ib_write_bw --report_gbits -D prints it (peak 0.00 in duration mode).
PERFTEST = """---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF          Device         : rocep1s0f1
 Number of qps   : 1            Transport type : IB
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 65536      1069560          0.00               {gbps}               0.356511
---------------------------------------------------------------------------------------
"""


@pytest.mark.parametrize(
    ("run", "problem"),
    [
        ({"rc": 0, "stdout": PERFTEST.format(gbps="186.92")}, None),
        (
            {"rc": 0, "stdout": PERFTEST.format(gbps="13.07")},
            "spark-a -> spark-b (192.168.100.11): 13.07 Gb/s measured by ib_write_bw, below the floor of 90 Gb/s",
        ),
        (
            {"rc": 1, "stdout": "", "stderr": "Couldn't connect to 192.168.100.11:18515\n"},
            "spark-a -> spark-b (192.168.100.11): ib_write_bw measured nothing (rc 1: Couldn't connect to "
            "192.168.100.11:18515)",
        ),
        ({"rc": 0, "stdout": "unexpected output"}, "ib_write_bw measured nothing (rc 0: unexpected output)"),
    ],
)
def test_the_bandwidth_floor_names_both_nodes_and_the_measured_rate(run, problem):
    runs = [{"client": "spark-a", "server": "spark-b", "address": "192.168.100.11", **run}]
    measurements, problems = bandwidth_problems(runs, 90)
    assert measurements[0]["gbps"] == bw_average_gbps(run["stdout"])
    assert (problems == []) if problem is None else (len(problems) == 1 and problem in problems[0]), problems


def test_the_module_judges_every_pair_at_once():
    runs = [
        {
            "client": "spark-a",
            "server": "spark-b",
            "address": "10.0.0.2",
            "rc": 0,
            "stdout": PERFTEST.format(gbps="95"),
        },
        {"client": "spark-a", "server": "spark-c", "address": "10.0.0.3", "rc": 0, "stdout": PERFTEST.format(gbps="9")},
        {"client": "spark-b", "server": "spark-c", "address": "10.0.0.3", "rc": 0, "stdout": PERFTEST.format(gbps="8")},
    ]
    result = run_module(roce_bandwidth, dict(runs=runs, floor_gbps=90))
    assert [m["gbps"] for m in result["measurements"]] == [95.0, 9.0, 8.0]
    assert [p.split(":")[0] for p in result["problems"]] == [
        "spark-a -> spark-c (10.0.0.3)",
        "spark-b -> spark-c (10.0.0.3)",
    ]
