"""Fault tests for roles/roce_network on the real two-node test bed.

The "CX-7" link is a docker network with MTU 9000 between the nodes, so the DF ping at full MTU is a real
test of the link; the RDMA device is the sysfs stand-in tree bind-mounted from .testbed/<N>/node-K/sys.
Every failure must name the node and the fact, and leave both nodes exactly as they were.
"""

import json
import re

import pytest

from tests.testbed.helpers import INSTANCE, assert_never_ran, node_exec, playbook

pytestmark = pytest.mark.testbed

CONVERGE = "molecule/roce_network/converge.yml"
VERIFY = "molecule/roce_network/verify.yml"
NETDEV = "enp1s0f1np1"
NETPLAN = "/etc/netplan/40-spark-serve-roce.yaml"
FAST_NET = f"10.253.{16 * int(INSTANCE) + 1}"
ADDRESS = {0: f"{FAST_NET}.10", 1: f"{FAST_NET}.11"}


def node_state(index):
    """Live MTU, link flag and IPv4 addresses of the CX-7 netdev, and the netplan file (mode + content)."""
    rc, out = node_exec(index, f"ip -j addr show dev {NETDEV}")
    assert rc == 0, out
    link = json.loads(out)[0]
    rc, netplan = node_exec(index, f"stat -c %a {NETPLAN} && cat {NETPLAN} || echo absent")
    return {
        "mtu": link["mtu"],
        "up": "UP" in link["flags"],
        "ipv4": sorted(f"{a['local']}/{a['prefixlen']}" for a in link["addr_info"] if a["family"] == "inet"),
        "netplan": netplan,
    }


def pair_state():
    return {index: node_state(index) for index in (0, 1)}


def converged(state):
    return all(s["mtu"] == 9000 and s["ipv4"] == [f"{ADDRESS[i]}/24"] for i, s in state.items())


def reset_pair():
    """The link as `testbed.py up` leaves it: MTU 1500, no address, no netplan file."""
    for index in (0, 1):
        rc, out = node_exec(
            index, f"ip addr flush dev {NETDEV} && ip link set dev {NETDEV} mtu 1500 up && rm -f {NETPLAN}"
        )
        assert rc == 0, out


def recap_changed(out, node):
    match = re.search(rf"^{node}\s+: ok=\d+\s+changed=(\d+)", out, re.M)
    assert match, out[-3000:]
    return int(match.group(1))


def port_state_file(testbed, index):
    return testbed["state"] / f"node-{index}" / "sys/class/infiniband/rocep1s0f1/ports/1/state"


@pytest.fixture(scope="module", autouse=True)
def dgx_os(testbed):
    """The nodes as DGX OS ships them (its RDMA tools: ibdev2netdev, perftest), whatever an earlier module left."""
    rc, out = playbook("molecule/shared/dgx_os.yml")
    assert rc == 0, out[-3000:]


@pytest.fixture
def restore(testbed):
    """Put the pair back the way the test found it (converged, or fresh as after `testbed.py up`)."""
    was_converged = converged(pair_state())
    yield
    if not was_converged:
        reset_pair()
    elif not converged(pair_state()):  # a test that left the link converged needs no run
        rc, out = playbook(CONVERGE)
        assert rc == 0, out[-3000:]
        assert converged(pair_state())


@pytest.fixture
def converged_pair(restore):
    if not converged(pair_state()):
        rc, out = playbook(CONVERGE)
        assert rc == 0, out[-3000:]
    state = pair_state()
    assert converged(state), state
    return state


def test_down_rdma_port_fails_before_anything_changes(testbed, restore):
    """(a) node-1's RDMA port DOWN: node-1 names port and sysfs file, node-0 is held back, nothing changes."""
    reset_pair()
    before = pair_state()
    state_file = port_state_file(testbed, 1)
    original = state_file.read_text()
    state_file.write_text("1: DOWN\n")
    try:
        rc, out = playbook(CONVERGE)
    finally:
        state_file.write_text(original)
    assert rc != 0, out[-3000:]
    assert (
        "node-1: RDMA port rocep1s0f1/1 is DOWN (/opt/testbed/sys/class/infiniband/rocep1s0f1/ports/1/state"
        ' = "1: DOWN"), expected ACTIVE'
    ) in out, out[-3000:]
    assert "node-0: left unchanged because node-1 failed" in out
    assert "node-0: RDMA port" not in out
    assert_never_ran(out, "roce_network", "Converge the live netdev")
    assert_never_ran(out, "roce_network", "Write the netplan file")
    assert pair_state() == before


def test_inputs_checked_across_nodes_before_anything_changes(converged_pair):
    """Every problem of every node in one run: an MTU that differs between the two ends and a twin (second rail) with
    neither an address in the inventory nor its RDMA port."""
    per_host_mtu = '{"roce_network_mtu": "{{ 1500 if inventory_hostname == \'node-1\' else 9000 }}"}'
    rc, out = playbook(
        CONVERGE,
        "inventories/testbed-pair",
        "-e",
        per_host_mtu,
        "-e",
        '{"roce_network_nccl_ib_hca_twins": ["roceP2p1s0f1:1"]}',
    )
    assert rc != 0, out[-3000:]
    assert "node-0: roce_network_mtu 9000 differs from node-1's 1500" in out, out[-3000:]
    assert "node-1: roce_network_mtu 1500 differs from node-0's 9000" in out
    for node in ("node-0", "node-1"):
        assert f"{node}: roce_network_twin_addresses has no address for roceP2p1s0f1 (rule: every twin" in out
        assert f"{node}: RDMA port roceP2p1s0f1/1 not found (no /opt/testbed/sys/class/infiniband/roceP2p1s0f1" in out
    assert_never_ran(out, "roce_network", "Converge the live netdev")
    assert pair_state() == converged_pair


def test_peer_mtu_1500_fails_the_df_ping(converged_pair):
    """(b) node-1's live MTU dropped to 1500 after converge: full-MTU DF pings fail both ways, named per node."""
    rc, out = node_exec(1, f"ip link set dev {NETDEV} mtu 1500")
    assert rc == 0, out
    before = pair_state()
    rc, out = playbook(VERIFY)
    assert rc != 0, out[-3000:]
    assert (
        f"node-0: DF ping at MTU 9000 (8972-byte payload, -M do) to node-1 {ADDRESS[1]} failed: "
        "3 packets transmitted, 0 received"
    ) in out, out[-3000:]
    assert "node-1: enp1s0f1np1 live MTU is 1500, expected 9000" in out
    assert (
        f"node-1: DF ping at MTU 9000 (8972-byte payload, -M do) to node-0 {ADDRESS[0]} failed: "
        "ping: sendmsg: Message too long"
    ) in out
    assert pair_state() == before  # verification changes nothing


def test_gid_index_is_detected_per_node(testbed, converged_pair, tmp_path):
    """The RoCE v2 GID index is read from sysfs on every run: node-1's moves from 3 to 5 (as after a reboot)."""
    port = port_state_file(testbed, 1).parent
    files = {p: p.read_text() for p in [*port.glob("gids/*"), *port.glob("gid_attrs/types/*")]}
    mapped = (port / "gids" / "3").read_text()
    (port / "gids" / "3").write_text("0000:0000:0000:0000:0000:0000:0000:0000\n")
    for index, kind in ((4, "IB/RoCE v1"), (5, "RoCE v2")):
        (port / "gids" / str(index)).write_text(mapped)
        (port / "gid_attrs" / "types" / str(index)).write_text(f"{kind}\n")
    play = tmp_path / "gid.yml"
    play.write_text("""
- hosts: spark_nodes
  gather_facts: false
  tasks:
    - {ansible.builtin.include_role: {name: roce_network, tasks_from: verify}}
    - {ansible.builtin.debug: {msg: "GID={{ roce_network_engine_env.NCCL_IB_GID_INDEX }}"}}
""")
    try:
        rc, out = playbook(str(play))
    finally:
        for extra in (port / "gids" / "4", port / "gids" / "5", port / "gid_attrs/types/4", port / "gid_attrs/types/5"):
            extra.unlink()
        for path, text in files.items():
            path.write_text(text)
    assert rc == 0, out[-3000:]
    assert re.search(r'ok: \[node-0\] => \{\s*"msg": "GID=3"', out), out[-3000:]
    assert re.search(r'ok: \[node-1\] => \{\s*"msg": "GID=5"', out), out[-3000:]


def test_check_mode_reports_drift_and_converge_repairs_it(converged_pair):
    """--check --diff shows node-1's pending MTU change without making it; a real run repairs only node-1."""
    rc, out = node_exec(1, f"ip link set dev {NETDEV} mtu 1500")
    assert rc == 0, out
    drifted = pair_state()
    rc, out = playbook(CONVERGE, "inventories/testbed-pair", "--check", "--diff")
    assert rc == 0, out[-3000:]
    assert "-mtu: 1500\n+mtu: 9000" in out
    assert (recap_changed(out, "node-0"), recap_changed(out, "node-1")) == (0, 1)
    assert pair_state() == drifted
    rc, out = playbook(CONVERGE)
    assert rc == 0, out[-3000:]
    assert (recap_changed(out, "node-0"), recap_changed(out, "node-1")) == (0, 1)
    assert pair_state() == converged_pair
    rc, out = playbook(CONVERGE, "inventories/testbed-pair", "--check", "--diff")
    assert rc == 0, out[-3000:]
    assert (recap_changed(out, "node-0"), recap_changed(out, "node-1")) == (0, 0)
    assert "RoCE v2 GID index 3" in out  # verification runs in check mode when nothing is pending


def test_a_throttled_link_is_refused_by_the_bandwidth_floor_naming_both_nodes(converged_pair):
    """(c) Alone proves the bandwidth floor: node-0's fast link throttled to 100 Mbit/s (tc, inside the test node)
    still passes every other check (state, MTU, GID, DF pings), and the measurement between the pair refuses it,
    naming both nodes, the address and the rate, on every node at once."""
    throttle = f"tc qdisc add dev {NETDEV} root tbf rate 100mbit burst 64kb latency 100ms"
    rc, out = node_exec(0, throttle)
    assert rc == 0, out
    try:
        rc, out = playbook(CONVERGE)
    finally:
        node_exec(0, f"tc qdisc del dev {NETDEV} root")
    assert rc != 0, out[-3000:]
    measured = re.search(
        rf"node-0 -> node-1 rail rocep1s0f1 \({ADDRESS[1]}\): ([0-9.]+) Gb/s measured by ib_write_bw \(4 QPs, 1 s\), "
        "below the floor of 1 Gb/s",
        out,
    )
    assert measured and float(measured.group(1)) < 0.2, out[-3000:]
    print(f"\n[throttled fast link] measured {measured.group(1)} Gb/s against the floor of 1 Gb/s")
    assert "DF ping" not in out and recap_changed(out, "node-1") == 0
    rc, out = playbook(CONVERGE)  # back at full speed, the same link passes the floor
    assert rc == 0, out[-3000:]
    assert re.search(
        rf"node-0 -> node-1 rail rocep1s0f1 \({ADDRESS[1]}\): [0-9.]+ Gb/s \(floor 1, 4 QPs, 1 s\)", out
    ), out[-3000:]
