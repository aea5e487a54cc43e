"""roles/roce_network's judgement (module_utils/roce_checks.py) and its module roce_link, run against a sysfs tree
laid out as a CX-7's: every problem is found at once, named by node, value and what was expected."""

import re

import pytest
import yaml
from ansible.module_utils.roce_checks import (
    DEGRADED_GBPS,
    Link,
    bandwidth_problems,
    bw_average_gbps,
    gid_indexes,
    ipv4_address,
    ipv4_gid,
    subnet,
)
from ansible.modules import roce_bandwidth, roce_link

from tests.module_harness import ROOT, run_module

GID = "0000:0000:0000:0000:0000:ffff:c0a8:640a"  # 192.168.100.10
TWIN_GID = "0000:0000:0000:0000:0000:ffff:c0a8:c80a"  # 192.168.200.10
LIVE = {"before": {"mtu": 9000, "up": True, "ipv4": ["192.168.100.10/24"]}}
TWIN = {"device": "roceP2p1s0f1", "port": "1", "interface": "enP2p1s0f1np1", "address": "192.168.200.10"}
TWIN_LIVE = {"before": {"mtu": 9000, "up": True, "ipv4": ["192.168.200.10/24"]}, "item": TWIN}
PING = {"peer": "node-1", "rail": "rocep1s0f1", "interface": "enp1s0f1np1", "address": "192.168.100.11"}
TWIN_PING = {"peer": "node-1", "rail": "roceP2p1s0f1", "interface": "enP2p1s0f1np1", "address": "192.168.200.11"}


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
        "twins": [TWIN],
        **changes,
    }


def write_port(root, device, state="4: ACTIVE", gids=None):
    """A port directory: its state, and {index: (gid, type)} in gids/ and gid_attrs/types/."""
    port = root / "class" / "infiniband" / device / "ports" / "1"
    (port / "gids").mkdir(parents=True, exist_ok=True)
    (port / "gid_attrs" / "types").mkdir(parents=True, exist_ok=True)
    (port / "state").write_text(state + "\n")
    for index, (gid, kind) in (gids or {}).items():
        (port / "gids" / str(index)).write_text(gid + "\n")
        (port / "gid_attrs" / "types" / str(index)).write_text(kind + "\n")


def judge(tmp_path, stage, **args):
    args.setdefault("twin_netdevs", [TWIN_LIVE])
    result = run_module(roce_link, {"stage": stage, "link": settings(tmp_path, **args.pop("link", {})), **args})
    assert not result["failed"], result
    return result


def ping(target, rc=0, **output):
    return {"item": target, "rc": rc, "cmd": ["ping", "-M", "do", target["address"]], **output}


@pytest.fixture()
def cx7(tmp_path):
    """Both rails ACTIVE, each with its address's GID at index 3 as RoCE v2 (index 2: the same GID as RoCE v1)."""
    write_port(tmp_path, "rocep1s0f1", gids={2: (GID, "IB/RoCE v1"), 3: (GID, "RoCE v2")})
    write_port(tmp_path, "roceP2p1s0f1", gids={2: (TWIN_GID, "IB/RoCE v1"), 3: (TWIN_GID, "RoCE v2")})
    return tmp_path


def test_a_healthy_link_has_no_problem_and_names_its_gid_index(cx7):
    result = judge(cx7, "verify", netdev=LIVE, pings=[ping(PING), ping(TWIN_PING)])
    assert result["problems"] == []
    assert (result["ready"], result["gid"], result["gid_index"], result["subnet"]) == (True, GID, 3, "192.168.100.0/24")


def test_verify_lists_every_live_problem_at_once(cx7):
    write_port(cx7, "rocep1s0f9", state="1: DOWN")
    (cx7 / "class/infiniband/roceP2p1s0f1/ports/1/gid_attrs/types/3").write_text("IB/RoCE v1\n")
    failed = {
        "rc": 1,
        "stderr_lines": ["ping: sendmsg: Message too long", "ping: sendmsg: Message too long"],
        "stdout_lines": ["PING x", "3 packets transmitted, 0 received, 100% packet loss, time 402ms"],
    }
    result = judge(
        cx7,
        "verify",
        link={"hcas": ["rocep1s0f1:1", "roceP2p1s0f1:1", "rocep1s0f9:1"]},
        netdev={"before": {"mtu": 1500, "up": False, "ipv4": []}},
        pings=[ping(PING, **failed)],
    )
    assert result["problems"] == [
        "node-0: enp1s0f1np1 live MTU is 1500, expected 9000",
        "node-0: enp1s0f1np1 is administratively down, expected up",
        "node-0: enp1s0f1np1 live IPv4 is none, expected 192.168.100.10/24",
        f'node-0: RDMA port rocep1s0f9/1 is DOWN ({cx7}/class/infiniband/rocep1s0f9/ports/1/state = "1: DOWN"), '
        "expected ACTIVE",
        f"node-0: rail roceP2p1s0f1/1 has no RoCE v2 GID at index 3 for 192.168.200.10 (gids/3 = {TWIN_GID}, type "
        f"IB/RoCE v1; expected {TWIN_GID}, RoCE v2), the NCCL_IB_GID_INDEX of rocep1s0f1: is 192.168.200.10 on "
        "enP2p1s0f1np1 and is roceP2p1s0f1 its RDMA device?",
        "node-0: DF ping at MTU 9000 (8972-byte payload, -M do) to node-1 192.168.100.11 failed: ping: sendmsg: "
        "Message too long; 3 packets transmitted, 0 received, 100% packet loss, time 402ms; both ends and the link "
        "need MTU 9000",
    ]
    assert result["ready"] is False


TWIN_PORT = "class/infiniband/roceP2p1s0f1/ports/1"


@pytest.mark.parametrize(
    ("fault", "twin_live", "pings", "problem"),
    [
        ("MTU 1500", {"mtu": 1500}, [], "node-0: enP2p1s0f1np1 live MTU is 1500, expected 9000"),
        ("down", {"up": False}, [], "node-0: enP2p1s0f1np1 is administratively down, expected up"),
        ("no address", {"ipv4": []}, [], "node-0: enP2p1s0f1np1 live IPv4 is none, expected 192.168.200.10/24"),
        (
            "another address",
            {"ipv4": ["192.168.100.10/24"]},
            [],
            "node-0: enP2p1s0f1np1 live IPv4 is 192.168.100.10/24, expected 192.168.200.10/24",
        ),
        (
            "a DF ping that does not come back on the twin",
            {},
            [ping(TWIN_PING, rc=1, stdout_lines=["3 packets transmitted, 0 received, 100% packet loss"])],
            "node-0: DF ping at MTU 9000 (8972-byte payload, -M do) to node-1 192.168.200.11 on rail roceP2p1s0f1 "
            "(enP2p1s0f1np1) failed: 3 packets transmitted, 0 received, 100% packet loss; both ends and the link need "
            "MTU 9000",
        ),
    ],
)
def test_verify_holds_the_twin_to_its_own_netdev_address_and_pings(cx7, fault, twin_live, pings, problem):
    live = {"before": dict(TWIN_LIVE["before"], **twin_live), "item": TWIN}
    result = judge(cx7, "verify", netdev=LIVE, twin_netdevs=[live], pings=pings)
    assert result["problems"] == [problem], fault


@pytest.mark.parametrize(
    ("fault", "files", "problem"),
    [
        (
            "the GID of the first rail's address (the twin's netdev has none of its own)",
            {"gids/3": GID},
            f"node-0: rail roceP2p1s0f1/1 has no RoCE v2 GID at index 3 for 192.168.200.10 (gids/3 = {GID}, type "
            f"RoCE v2; expected {TWIN_GID}, RoCE v2), the NCCL_IB_GID_INDEX of rocep1s0f1: is 192.168.200.10 on "
            "enP2p1s0f1np1 and is roceP2p1s0f1 its RDMA device?",
        ),
        (
            "a link-local GID at the index",
            {"gids/3": "fe80:0000:0000:0000:0000:0000:0000:0001"},
            "node-0: rail roceP2p1s0f1/1 has no RoCE v2 GID at index 3 for 192.168.200.10 (gids/3 = "
            f"fe80:0000:0000:0000:0000:0000:0000:0001, type RoCE v2; expected {TWIN_GID}, RoCE v2)",
        ),
        (
            "the port DOWN",
            {"state": "1: DOWN"},
            f'node-0: RDMA port roceP2p1s0f1/1 is DOWN (<root>/{TWIN_PORT}/state = "1: DOWN"), expected ACTIVE',
        ),
    ],
)
def test_verify_holds_the_twin_port_to_its_own_gid(cx7, fault, files, problem):
    for name, text in files.items():
        (cx7 / TWIN_PORT / name).write_text(text + "\n")
    result = judge(cx7, "verify", netdev=LIVE, pings=[])
    assert len(result["problems"]) == 1 and result["problems"][0].startswith(problem.replace("<root>", str(cx7))), fault
    assert result["ready"] is False  # a fresh twin address is waited for like the first rail's


def test_an_address_without_its_roce_v2_gid_is_named(cx7):
    result = judge(cx7, "verify", link={"address": "192.168.100.20"}, netdev=LIVE)
    assert result["gid_index"] is None and not result["ready"]
    assert result["problems"][-1] == (
        "node-0: no RoCE v2 GID 0000:0000:0000:0000:0000:ffff:c0a8:6414 (192.168.100.20) on RDMA port rocep1s0f1/1 "
        f"({cx7}/class/infiniband/rocep1s0f1/ports/1/gids, gid_attrs/types): is the address on enp1s0f1np1 and is "
        "rocep1s0f1 its RDMA device?"
    )


def test_precheck_lists_inputs_netdevs_ports_netplan_and_peers_at_once(tmp_path):
    write_port(tmp_path, "rocep1s0f1")  # no GID table entries; no twin port at all
    peers = [
        {"name": "node-1", "address": "10.0.0.1", "link": {"address": "10.0.0.1", "prefix_length": 24, "mtu": 1500}},
        {"name": "node-2", "address": None, "link": None},
    ]
    result = judge(
        tmp_path,
        "precheck",
        link={"hcas": ["rocep1s0f2", "roceP2p1s0f1:1"], "prefix_length": 33, "mtu": "jumbo"},
        netdev={"msg": "netdev enp1s0f1np1 not found: Device does not exist."},
        twin_netdevs=[{"msg": "netdev enP2p1s0f1np1 not found: Device does not exist.", "item": TWIN}],
        netplan_command=str(tmp_path / "netplan"),
        peers=peers,
    )
    assert result["problems"] == [
        "node-0: roce_network_prefix_length=33, expected 1..32",
        "node-0: roce_network_mtu=jumbo, expected an integer >= 1280 (9000 on the CX-7 link)",
        'node-0: NCCL_IB_HCA entry "rocep1s0f2" (roce_network_nccl_ib_hca) is not "device:port"',
        "node-0: roce_network_interface netdev enp1s0f1np1 not found: Device does not exist.",
        "node-0: roce_network_twin_interfaces.roceP2p1s0f1 netdev enP2p1s0f1np1 not found: Device does not exist.",
        f"node-0: RDMA port roceP2p1s0f1/1 not found (no {tmp_path}/{TWIN_PORT}/state; check roce_network_rdma_device "
        "and roce_network_sysfs_root)",
        f"node-0: no GID table in {tmp_path}/class/infiniband/rocep1s0f1/ports/1/gids (RDMA device rocep1s0f1 port 1)",
        f"node-0: {tmp_path}/netplan not found (roce_network_netplan_apply is true; false on nodes without netplan)",
        "node-0: roce_network_address 192.168.100.10/33 and node-1's 10.0.0.1/24 are not on one subnet",
        "node-0: roce_network_mtu jumbo differs from node-1's 1500 (both ends of the link need the same MTU)",
        "node-0: peer node-2 has no roce_network_address in the inventory",
    ]


def test_precheck_reads_a_down_port_only_once_its_netdev_is_up(tmp_path):
    write_port(tmp_path, "rocep1s0f1", state="1: DOWN", gids={3: (GID, "RoCE v2")})
    down = {"before": {"mtu": 1500, "up": False, "ipv4": []}}
    args = {"link": {"hcas": ["rocep1s0f1:1"], "twins": []}, "netdev": down, "twin_netdevs": []}
    assert judge(tmp_path, "precheck", **args)["problems"] == []
    problems = judge(tmp_path, "precheck", **dict(args, netdev=LIVE))["problems"]
    assert [p.split(" (")[0] for p in problems] == ["node-0: RDMA port rocep1s0f1/1 is DOWN"]


DOWN = {"before": {"mtu": 1500, "up": False, "ipv4": []}}


@pytest.mark.parametrize(
    ("first_netdev", "twin_netdev", "down_ports"),
    [
        (LIVE, TWIN_LIVE, ["rocep1s0f1/1", "roceP2p1s0f1/1"]),
        (LIVE, dict(DOWN, item=TWIN), ["rocep1s0f1/1"]),  # the twin's port is read again once its netdev is up
        (DOWN, TWIN_LIVE, ["roceP2p1s0f1/1"]),
        (DOWN, dict(DOWN, item=TWIN), []),
    ],
)
def test_precheck_reads_each_rails_port_once_its_own_netdev_is_up(tmp_path, first_netdev, twin_netdev, down_ports):
    write_port(tmp_path, "rocep1s0f1", state="1: DOWN", gids={3: (GID, "RoCE v2")})
    write_port(tmp_path, "roceP2p1s0f1", state="1: DOWN")
    problems = judge(tmp_path, "precheck", netdev=first_netdev, twin_netdevs=[twin_netdev])["problems"]
    assert [re.match(r"node-0: RDMA port (\S+) is DOWN", p).group(1) for p in problems] == down_ports


def test_a_missing_port_and_a_peer_with_the_same_address_are_named(tmp_path):
    peer = {
        "name": "node-1",
        "address": "192.168.100.10",
        "link": {"address": "192.168.100.10", "prefix_length": 24, "mtu": 9000},
    }
    link = {"hcas": ["rocep1s0f1:1"], "twins": []}
    problems = judge(tmp_path, "precheck", link=link, netdev=LIVE, twin_netdevs=[], peers=[peer])["problems"]
    assert problems == [
        f"node-0: RDMA port rocep1s0f1/1 not found (no {tmp_path}/class/infiniband/rocep1s0f1/ports/1/state; check "
        "roce_network_rdma_device and roce_network_sysfs_root)",
        "node-0: roce_network_address 192.168.100.10 is also node-1's",
    ]


@pytest.mark.parametrize("value", ["192.168.100", "192.168.100.10/24", "3232261130", "192.168.100.256", " 1.2.3.4"])
def test_only_a_bare_dotted_quad_is_an_address(value, tmp_path):
    assert ipv4_address(value) is None
    assert subnet(value, 24) is None
    link = {"address": value, "hcas": ["x:1"], "twins": []}
    problems = judge(tmp_path, "precheck", link=link, netdev=LIVE, twin_netdevs=[])["problems"]
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


# perftest's summary table as ib_write_bw --report_gbits -D prints it (peak 0.00 in duration mode), its BW average the
# sum over the queue pairs.
PERFTEST = """---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF          Device         : roceP2p1s0f1
 Number of qps   : 4            Transport type : IB
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 65536      1069560          0.00               {gbps}               0.356511
---------------------------------------------------------------------------------------
"""
RUN = {"client": "spark-a", "server": "spark-b", "rail": "roceP2p1s0f1", "address": "192.168.200.11"}
PATH = "spark-a -> spark-b rail roceP2p1s0f1 (192.168.200.11)"


def defaults():
    return yaml.safe_load((ROOT / "roles/roce_network/defaults/main.yml").read_text())


@pytest.mark.parametrize(
    ("run", "line", "problem"),
    [
        ({"rc": 0, "stdout": PERFTEST.format(gbps="96.10")}, f"{PATH}: 96.1 Gb/s (floor 80, 4 QPs, 10 s)", None),
        # NVIDIA's two-Spark guide: its healthy rails on one queue pair each
        ({"rc": 0, "stdout": PERFTEST.format(gbps="92.57")}, f"{PATH}: 92.57 Gb/s (floor 80, 4 QPs, 10 s)", None),
        ({"rc": 0, "stdout": PERFTEST.format(gbps="97.28")}, f"{PATH}: 97.28 Gb/s (floor 80, 4 QPs, 10 s)", None),
        (
            {"rc": 0, "stdout": PERFTEST.format(gbps="13.07")},
            f"{PATH}: 13.07 Gb/s (floor 80, 4 QPs, 10 s)",
            f"{PATH}: 13.07 Gb/s measured by ib_write_bw (4 QPs, 10 s), below the floor of 80 Gb/s "
            "(roce_network_bandwidth_floor_gbps): the 8-25 Gb/s of a CX-7 left in its degraded initialization "
            "state (NVIDIA's DGX Spark guide: reboot both nodes; if it stays, shut them down and unplug their power "
            "for 60 s)",
        ),
        (
            {"rc": 0, "stdout": PERFTEST.format(gbps="61.5")},
            f"{PATH}: 61.5 Gb/s (floor 80, 4 QPs, 10 s)",
            f"{PATH}: 61.5 Gb/s measured by ib_write_bw (4 QPs, 10 s), below the floor of 80 Gb/s "
            "(roce_network_bandwidth_floor_gbps): a degraded link (cable, transceiver, a CX-7 port trained at a lower "
            "speed) passes every other check and slows every step of the engine",
        ),
        (
            {"rc": 1, "stdout": "", "stderr": "Couldn't connect to 192.168.200.11:18515\n"},
            f"{PATH}: nothing measured (floor 80, 4 QPs, 10 s)",
            f"{PATH}: ib_write_bw measured nothing (rc 1: Couldn't connect to 192.168.200.11:18515)",
        ),
        (
            {"rc": 0, "stdout": "unexpected output"},
            f"{PATH}: nothing measured (floor 80, 4 QPs, 10 s)",
            f"{PATH}: ib_write_bw measured nothing (rc 0: unexpected output)",
        ),
    ],
)
def test_each_rail_is_held_to_the_floor_and_printed_beside_it(run, line, problem):
    measurements, problems = bandwidth_problems([dict(RUN, **run)], 80, 4, 10)
    assert measurements[0]["gbps"] == bw_average_gbps(run["stdout"])
    assert measurements[0]["line"] == line
    assert problems == ([] if problem is None else [problem])


def test_the_shipped_floor_passes_nvidias_healthy_rails_with_margin_and_fails_the_degraded_state():
    """The floor's reasons, as roles/roce_network/defaults/main.yml gives them: NVIDIA's single-QP healthy rails
    (92.57, 97.28 Gb/s) pass with at least 10 % to spare, the degraded state's ceiling (25 Gb/s) fails; several queue
    pairs, and a run long enough that perftest's margins (a quarter at each end) leave seconds of steady sending."""
    shipped = defaults()
    floor, qps, seconds = (shipped[f"roce_network_bandwidth_{key}"] for key in ("floor_gbps", "qps", "seconds"))
    assert floor <= 0.9 * min(92.57, 97.28) and floor > DEGRADED_GBPS[1]
    assert qps > 1 and seconds - 2 * (seconds // 4) >= 5


def test_the_module_judges_every_rail_of_every_pair_at_once():
    runs = [
        dict(RUN, server="spark-b", rail="rocep1s0f1", address="10.0.0.2", rc=0, stdout=PERFTEST.format(gbps="95")),
        dict(RUN, server="spark-b", address="10.0.1.2", rc=0, stdout=PERFTEST.format(gbps="94")),
        dict(RUN, server="spark-c", rail="rocep1s0f1", address="10.0.0.3", rc=0, stdout=PERFTEST.format(gbps="9")),
        dict(RUN, client="spark-b", server="spark-c", address="10.0.1.3", rc=0, stdout=PERFTEST.format(gbps="8")),
    ]
    result = run_module(roce_bandwidth, dict(runs=runs, floor_gbps=80, qps=4, seconds=10))
    assert [m["gbps"] for m in result["measurements"]] == [95.0, 94.0, 9.0, 8.0]
    assert [p.split(":")[0] for p in result["problems"]] == [
        "spark-a -> spark-c rail rocep1s0f1 (10.0.0.3)",
        "spark-b -> spark-c rail roceP2p1s0f1 (10.0.1.3)",
    ]
