"""What is wrong with a node's RoCE link, from what roles/roce_network probed: the problems it refuses before it
changes anything (precheck_problems) and after the change or alone (verify_problems), and the bandwidth measured on
every rail between every pair of nodes (bandwidth_problems). Pure: no Ansible imports;
roles/roce_network/library/roce_link.py and roce_bandwidth.py call these.

`sysfs` is {path: first line} of the RDMA port files that were readable (a real CX-7's unused GID entries are not);
`netdevs` is {netdev: roce_netdev's result} of every rail ("before" = live state, or "msg" when it cannot be read).
"""

import ipaddress
import re

HCA = re.compile(r"^([^:/]+):([0-9]+)$")  # one NCCL_IB_HCA entry, "device:port"


class Twin:
    """A rail after the first (roles/roce_network's roce_network_rails[1:]): its RDMA port, netdev and address."""

    def __init__(self, link, rail):
        self.device, self.port, self.interface = rail["device"], rail["port"], rail["interface"]
        self.address = rail["address"]
        self.name = f"{self.device}/{self.port}"
        self.port_dir = port_dir(link.sysfs_root, self.device, self.port)
        self.wanted_ipv4 = f"{self.address}/{link.prefix_length}"
        self.gid = ipv4_gid(self.address) if ipv4_address(self.address) else ""


class Link:
    """One node's link settings as the inventory gives them (raw: a bad value is a problem to report, not a crash)."""

    def __init__(self, p):
        self.node, self.address, self.prefix_length, self.mtu = p["node"], p["address"], p["prefix_length"], p["mtu"]
        self.interface, self.device, self.port = p["interface"], p["rdma_device"], p["rdma_port"]
        self.sysfs_root, self.hcas = p["sysfs_root"], p["hcas"]
        self.port_dir = port_dir(self.sysfs_root, self.device, self.port)
        self.wanted_ipv4 = f"{self.address}/{self.prefix_length}"
        self.valid_address = ipv4_address(self.address) is not None
        self.subnet = subnet(self.address, self.prefix_length)
        self.gid = ipv4_gid(self.address) if self.valid_address else ""
        self.twins = [Twin(self, rail) for rail in p.get("twins") or []]

    def state_files(self):
        """The state file of the GID port and of every NCCL_IB_HCA entry, each once."""
        files = [f"{self.port_dir}/state"]
        for hca in self.hcas:
            match = HCA.match(hca)
            if match and port_dir(self.sysfs_root, *match.groups()) + "/state" not in files:
                files.append(port_dir(self.sysfs_root, *match.groups()) + "/state")
        return files

    def probe_paths(self):
        """(files, directories) to read: port states, then the GID table and GID types of every rail."""
        dirs = [self.port_dir, *(twin.port_dir for twin in self.twins)]
        return self.state_files(), [f"{d}/{table}" for d in dirs for table in ("gids", "gid_attrs/types")]


def port_dir(sysfs_root, device, port):
    return f"{sysfs_root}/class/infiniband/{device}/ports/{port}"


def ipv4_address(value):
    """The address when `value` is a bare dotted-quad IPv4 address (no prefix, no integer), else None."""
    text = str(value)
    try:
        return text if re.fullmatch(r"[0-9.]+", text) and str(ipaddress.IPv4Address(text)) == text else None
    except ValueError:
        return None


def ipv4_gid(address):
    """The RoCE v2 GID of an IPv4 address: its IPv4-mapped IPv6 address, fully expanded as sysfs prints it."""
    octets = [int(part) for part in address.split(".")]
    return "0000:0000:0000:0000:0000:ffff:{:02x}{:02x}:{:02x}{:02x}".format(*octets)


def subnet(address, prefix_length):
    """The network with its prefix ("192.168.100.0/24"), or None when address or prefix is not valid."""
    if ipv4_address(address) is None or not re.fullmatch(r"[0-9]+", str(prefix_length)):
        return None
    try:
        return str(ipaddress.IPv4Interface(f"{address}/{prefix_length}").network)
    except ValueError:
        return None


def gid_indexes(sysfs, directory, gid):
    """Every GID index of a port directory whose GID is `gid` and whose type is RoCE v2, lowest first."""
    found = []
    for path, value in sysfs.items():
        match = re.fullmatch(re.escape(f"{directory}/gids/") + "([0-9]+)", path)
        if match and value == gid and sysfs.get(f"{directory}/gid_attrs/types/{match.group(1)}") == "RoCE v2":
            found.append(int(match.group(1)))
    return sorted(found)


def port_problems(link, sysfs, down=()):
    """Every RDMA port that is missing or not ACTIVE, but those of the port directories in `down`."""
    problems = []
    for state_file in link.state_files():
        if state_file.rsplit("/", 1)[0] in down:
            continue
        port = re.search(r"([^/]+)/ports/([0-9]+)/state$", state_file).expand(r"\1/\2")
        value = sysfs.get(state_file)
        if value is None:
            problems.append(
                f"{link.node}: RDMA port {port} not found (no {state_file}; check roce_network_rdma_device and "
                "roce_network_sysfs_root)"
            )
        elif not re.search(r": ACTIVE$", value):
            state = re.sub(r"^[0-9]+: *", "", value)
            problems.append(f'{link.node}: RDMA port {port} is {state} ({state_file} = "{value}"), expected ACTIVE')
    return problems


def input_problems(link):
    node, problems = link.node, []
    if not link.valid_address:
        problems.append(f"{node}: roce_network_address={link.address} is not an IPv4 address")
    length = str(link.prefix_length)
    if not re.fullmatch(r"[0-9]+", length) or not 1 <= int(length) <= 32:
        problems.append(f"{node}: roce_network_prefix_length={link.prefix_length}, expected 1..32")
    if not re.fullmatch(r"[0-9]+", str(link.mtu)) or int(link.mtu) < 1280:
        problems.append(f"{node}: roce_network_mtu={link.mtu}, expected an integer >= 1280 (9000 on the CX-7 link)")
    # The twins' entries are judged with every node's rails (module_utils/roce_rails.py).
    if link.hcas and not HCA.match(link.hcas[0]):
        problems.append(f'{node}: NCCL_IB_HCA entry "{link.hcas[0]}" (roce_network_nccl_ib_hca) is not "device:port"')
    return problems


def peer_problems(link, peers):
    """`peers`: [{name, address (None: not in the inventory), link (None: not in this play, else its address,
    prefix_length and mtu)}]."""
    node, problems = link.node, []
    for peer in peers:
        other = peer.get("link")
        if peer.get("address") is None:
            problems.append(f"{node}: peer {peer['name']} has no roce_network_address in the inventory")
            continue
        if other is None or not link.valid_address:
            continue
        if str(other["address"]) == str(link.address):
            problems.append(f"{node}: roce_network_address {link.address} is also {peer['name']}'s")
        elif subnet(other["address"], other["prefix_length"]) != link.subnet:
            problems.append(
                f"{node}: roce_network_address {link.wanted_ipv4} and {peer['name']}'s "
                f"{other['address']}/{other['prefix_length']} are not on one subnet"
            )
        if str(other["mtu"]) != str(link.mtu):
            problems.append(
                f"{node}: roce_network_mtu {link.mtu} differs from {peer['name']}'s {other['mtu']} (both ends of "
                "the link need the same MTU)"
            )
    return problems


def rail_netdevs(link):
    """(variable, netdev, wanted IPv4 address/prefix) of every rail: the first rail's, then each twin's."""
    return [("roce_network_interface", link.interface, link.wanted_ipv4)] + [
        (f"roce_network_twin_interfaces.{twin.device}", twin.interface, twin.wanted_ipv4) for twin in link.twins
    ]


def is_down(netdev):
    """A netdev that was read and is administratively down."""
    live = netdev.get("before")
    return live is not None and not live.get("up")


def down_ports(link, netdevs):
    """The port directories whose netdev is administratively down: a CX-7 port reports DOWN until its netdev is up,
    so they are read again once the link is up. The first rail's are every port that is no twin's."""
    twins = {twin.port_dir for twin in link.twins}
    down = {twin.port_dir for twin in link.twins if is_down(netdevs.get(twin.interface, {}))}
    if is_down(netdevs.get(link.interface, {})):
        down |= {state_file.rsplit("/", 1)[0] for state_file in link.state_files()} - twins
    return down


def unread_netdevs(link, netdevs):
    return [
        f"{link.node}: {field} {netdevs.get(interface, {}).get('msg', f'{interface} was not read')}"
        for field, interface, _ in rail_netdevs(link)
        if netdevs.get(interface, {}).get("before") is None
    ]


def precheck_problems(link, sysfs, netdevs, peers, missing_netplan=""):
    """Everything that can be known before a change: inputs, the netdevs, the RDMA ports, netplan, the peers."""
    node = link.node
    problems = (
        input_problems(link) + unread_netdevs(link, netdevs) + port_problems(link, sysfs, down_ports(link, netdevs))
    )
    if f"{link.port_dir}/state" in sysfs and not any(path.startswith(f"{link.port_dir}/gids") for path in sysfs):
        problems.append(f"{node}: no GID table in {link.port_dir}/gids (RDMA device {link.device} port {link.port})")
    if missing_netplan:
        problems.append(
            f"{node}: {missing_netplan} not found (roce_network_netplan_apply is true; false on nodes without netplan)"
        )
    return problems + peer_problems(link, peers)


def netdev_problems(node, interface, mtu, wanted, live):
    """The live state of one rail's netdev against the MTU and its one IPv4 address (`wanted`, address/prefix)."""
    problems = []
    if str(live.get("mtu")) != str(mtu):
        problems.append(f"{node}: {interface} live MTU is {live.get('mtu')}, expected {mtu}")
    if not live.get("up"):
        problems.append(f"{node}: {interface} is administratively down, expected up")
    if live.get("ipv4") != [wanted]:
        shown = ", ".join(live.get("ipv4") or []) or "none"
        problems.append(f"{node}: {interface} live IPv4 is {shown}, expected {wanted}")
    return problems


def live_problems(link, netdevs):
    problems = unread_netdevs(link, netdevs)
    for _, interface, wanted in rail_netdevs(link):
        live = netdevs.get(interface, {}).get("before")
        problems += netdev_problems(link.node, interface, link.mtu, wanted, live) if live is not None else []
    return problems


def twin_gid_missing(link, sysfs, index, twin):
    """Why the twin has no RoCE v2 GID of its address at `index`, or "" when it has."""
    gid = sysfs.get(f"{twin.port_dir}/gids/{index}", "none")
    kind = sysfs.get(f"{twin.port_dir}/gid_attrs/types/{index}", "none")
    if kind == "RoCE v2" and gid == twin.gid:
        return ""
    return (
        f"{link.node}: rail {twin.name} has no RoCE v2 GID at index {index} for {twin.address} (gids/{index} = {gid}, "
        f"type {kind}; expected {twin.gid}, RoCE v2), the NCCL_IB_GID_INDEX of {link.device}: is {twin.address} on "
        f"{twin.interface} and is {twin.device} its RDMA device?"
    )


def gid_problems(link, sysfs, indexes):
    node = link.node
    if not indexes:
        return [
            f"{node}: no RoCE v2 GID {link.gid} ({link.address}) on RDMA port {link.device}/{link.port} "
            f"({link.port_dir}/gids, gid_attrs/types): is the address on {link.interface} and is {link.device} its "
            "RDMA device?"
        ]
    # NCCL uses one GID index (NCCL_IB_GID_INDEX) on every NCCL_IB_HCA port: each rail needs its address's RoCE v2 GID
    # there. A missing port is port_problems', a twin without a good address roce_rails'.
    judged = [twin for twin in link.twins if f"{twin.port_dir}/state" in sysfs and twin.gid]
    return [why for twin in judged for why in [twin_gid_missing(link, sysfs, indexes[0], twin)] if why]


def ping_problems(link, pings):
    """`pings`: the DF ping task's loop results, each item a roce_rails target ({peer, rail, interface, address});
    the address pinged is the last word of each command."""
    problems = []
    for ping in pings:
        if ping.get("rc", 1) == 0:
            continue
        # e.g. "ping: sendmsg: Message too long" (local MTU) and/or the statistics line (no reply)
        errors = list(dict.fromkeys(ping.get("stderr_lines") or []))
        lines = [line for line in ping.get("stdout_lines") or [] if re.search("transmitted|From ", line)]
        why = "; ".join(errors + lines) or ping.get("msg") or "no output"
        target = ping["item"]
        rail = "" if target["interface"] == link.interface else f" on rail {target['rail']} ({target['interface']})"
        problems.append(
            f"{link.node}: DF ping at MTU {link.mtu} ({int(link.mtu) - 28}-byte payload, -M do) to {target['peer']} "
            f"{(ping.get('cmd') or ['?'])[-1]}{rail} failed: {why}; both ends and the link need MTU {link.mtu}"
        )
    return problems


def ready(link, sysfs, indexes):
    """Every RDMA port ACTIVE and the RoCE v2 GID of every rail's address: what a fresh address waits for."""
    return not port_problems(link, sysfs) and bool(indexes) and not gid_problems(link, sysfs, indexes)


def verify_problems(link, sysfs, netdevs, pings):
    """After the change (or alone): every rail's live netdev, the RDMA ports, the RoCE v2 GID on every rail, a DF
    ping to each peer on each rail."""
    indexes = gid_indexes(sysfs, link.port_dir, link.gid)
    return (
        live_problems(link, netdevs)
        + port_problems(link, sysfs)
        + gid_problems(link, sysfs, indexes)
        + ping_problems(link, pings)
    )


def bw_average_gbps(output):
    """The `BW average[Gb/sec]` column of perftest's summary table (ib_write_bw --report_gbits), or None."""
    lines = output.splitlines()
    for index, line in enumerate(lines):
        if "BW average[Gb/sec]" in line:
            column = [word for word in line.split() if word != "BW"].index("average[Gb/sec]")  # "BW x" is one column
            values = next((row.split() for row in lines[index + 1 :] if row.split() and row.split()[0].isdigit()), [])
            try:
                return float(values[column])
            except (IndexError, ValueError):
                return None
    return None


# NVIDIA's DGX Spark guide: a CX-7 left in its degraded initialization state runs 8-25 Gb/s per rail.
DEGRADED_GBPS = (8, 25)


def measured_line(run, gbps, floor_gbps, qps, seconds):
    """`spark-a -> spark-b rail roceP2p1s0f1 (192.168.200.11): 96.1 Gb/s (floor 80, 4 QPs, 10 s)`."""
    rate = "nothing measured" if gbps is None else f"{gbps:g} Gb/s"
    return f"{run_path(run)}: {rate} (floor {floor_gbps:g}, {qps} QPs, {seconds} s)"


def run_path(run):
    return f"{run['client']} -> {run['server']} rail {run['rail']} ({run['address']})"


def below_floor(run, gbps, floor_gbps, qps, seconds, command):
    hint = (
        ": the 8-25 Gb/s of a CX-7 left in its degraded initialization state (NVIDIA's DGX Spark guide: reboot both "
        "nodes; if it stays, shut them down and unplug their power for 60 s)"
        if DEGRADED_GBPS[0] <= gbps <= DEGRADED_GBPS[1]
        else ": a degraded link (cable, transceiver, a CX-7 port trained at a lower speed) passes every other check "
        "and slows every step of the engine"
    )
    return (
        f"{run_path(run)}: {gbps:g} Gb/s measured by {command} ({qps} QPs, {seconds} s), below the floor of "
        f"{floor_gbps:g} Gb/s (roce_network_bandwidth_floor_gbps){hint}"
    )


def bandwidth_problems(runs, floor_gbps, qps, seconds, command="ib_write_bw"):
    """(measurements, problems) of one measurement per rail per pair of nodes: each run is {client, server, rail,
    address, rc, stdout, stderr} of `command` sent from client to the server's address on that rail, with `qps` queue
    pairs for `seconds`; below floor_gbps is a problem. Each measurement carries its line as printed."""
    measurements, problems = [], []
    for run in runs:
        gbps = bw_average_gbps(run.get("stdout") or "") if run.get("rc") == 0 else None
        measurements.append(
            {
                "client": run["client"],
                "server": run["server"],
                "rail": run["rail"],
                "gbps": gbps,
                "line": measured_line(run, gbps, floor_gbps, qps, seconds),
            }
        )
        if gbps is None:
            said = (run.get("stderr") or run.get("stdout") or "no output").strip().splitlines()[-1:] or ["no output"]
            problems.append(f"{run_path(run)}: {command} measured nothing (rc {run.get('rc')}: {said[0]})")
        elif gbps < floor_gbps:
            problems.append(below_floor(run, gbps, floor_gbps, qps, seconds, command))
    return measurements, problems
