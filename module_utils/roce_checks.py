"""What is wrong with a node's RoCE link, from what roles/roce_network probed: the problems it refuses before it
changes anything (precheck_problems) and after the change or alone (verify_problems). Pure: no Ansible imports;
roles/roce_network/library/roce_link.py reads the node and calls these.

`sysfs` is {path: first line} of the RDMA port files that were readable (a real CX-7's unused GID entries are not);
`netdev` is roce_netdev's result ("before" = live state, or "msg" when the device cannot be read).
"""

import ipaddress
import re

HCA = re.compile(r"^([^:/]+):([0-9]+)$")  # one NCCL_IB_HCA entry, "device:port"
ZERO_GID = re.compile(r"^[0:]+$")


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

    def state_files(self):
        """The state file of the GID port and of every NCCL_IB_HCA entry, each once."""
        files = [f"{self.port_dir}/state"]
        for hca in self.hcas:
            match = HCA.match(hca)
            if match and port_dir(self.sysfs_root, *match.groups()) + "/state" not in files:
                files.append(port_dir(self.sysfs_root, *match.groups()) + "/state")
        return files

    def twin_dirs(self):
        """The port directory of every other rail (the HCA entries after the first)."""
        return [port_dir(self.sysfs_root, *HCA.match(hca).groups()) for hca in self.hcas[1:] if HCA.match(hca)]

    def probe_paths(self):
        """(files, directories) to read: port states, then the GID table and GID types of every rail."""
        dirs = [f"{d}/{table}" for d in [self.port_dir, *self.twin_dirs()] for table in ("gids", "gid_attrs/types")]
        return self.state_files(), dirs


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


def port_problems(link, sysfs):
    problems = []
    for state_file in link.state_files():
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
    problems += [
        f'{node}: NCCL_IB_HCA entry "{hca}" (roce_network_nccl_ib_hca/_twins) is not "device:port"'
        for hca in link.hcas
        if not HCA.match(hca)
    ]
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


def precheck_problems(link, sysfs, netdev, peers, missing_netplan=""):
    """Everything that can be known before a change: inputs, the netdev, the RDMA port, netplan, the peers."""
    node, live = link.node, netdev.get("before")
    problems = input_problems(link)
    if live is None:
        problems.append(f"{node}: roce_network_interface {netdev.get('msg', '')}")
    # A CX-7 port whose netdev is administratively down reports DOWN: checked again once the link is up.
    if live is None or live.get("up"):
        problems += port_problems(link, sysfs)
    if f"{link.port_dir}/state" in sysfs and not any(path.startswith(f"{link.port_dir}/gids") for path in sysfs):
        problems.append(f"{node}: no GID table in {link.port_dir}/gids (RDMA device {link.device} port {link.port})")
    if missing_netplan:
        problems.append(
            f"{node}: {missing_netplan} not found (roce_network_netplan_apply is true; false on nodes without netplan)"
        )
    return problems + peer_problems(link, peers)


def live_problems(link, netdev):
    node, dev, live = link.node, link.interface, netdev.get("before")
    if live is None:
        return [f"{node}: roce_network_interface {netdev.get('msg', '')}"]
    problems = []
    if str(live.get("mtu")) != str(link.mtu):
        problems.append(f"{node}: {dev} live MTU is {live.get('mtu')}, expected {link.mtu}")
    if not live.get("up"):
        problems.append(f"{node}: {dev} is administratively down, expected up")
    if live.get("ipv4") != [link.wanted_ipv4]:
        shown = ", ".join(live.get("ipv4") or []) or "none"
        problems.append(f"{node}: {dev} live IPv4 is {shown}, expected {link.wanted_ipv4}")
    return problems


def gid_problems(link, sysfs, indexes):
    node = link.node
    if not indexes:
        return [
            f"{node}: no RoCE v2 GID {link.gid} ({link.address}) on RDMA port {link.device}/{link.port} "
            f"({link.port_dir}/gids, gid_attrs/types): is the address on {link.interface} and is {link.device} its "
            "RDMA device?"
        ]
    # NCCL uses one GID index (NCCL_IB_GID_INDEX) on every NCCL_IB_HCA port: each rail needs a RoCE v2 GID there.
    index, problems = indexes[0], []
    for twin in link.twin_dirs():
        if f"{twin}/state" not in sysfs:
            continue
        gid = sysfs.get(f"{twin}/gids/{index}", "none")
        kind = sysfs.get(f"{twin}/gid_attrs/types/{index}", "none")
        if kind != "RoCE v2" or ZERO_GID.match(gid) or gid.startswith("fe80:"):
            rail = twin.split("/infiniband/")[-1].replace("/ports/", "/")
            problems.append(
                f"{node}: rail {rail} has no RoCE v2 GID at index {index} (gids/{index} = {gid}, type {kind}), the "
                f"NCCL_IB_GID_INDEX of {link.device}: give its netdev an address on the fabric"
            )
    return problems


def ping_problems(link, pings):
    """`pings`: the DF ping task's loop results; the address pinged is the last word of each command."""
    problems = []
    for ping in pings:
        if ping.get("rc", 1) == 0:
            continue
        # e.g. "ping: sendmsg: Message too long" (local MTU) and/or the statistics line (no reply)
        errors = list(dict.fromkeys(ping.get("stderr_lines") or []))
        lines = [line for line in ping.get("stdout_lines") or [] if re.search("transmitted|From ", line)]
        why = "; ".join(errors + lines) or ping.get("msg") or "no output"
        problems.append(
            f"{link.node}: DF ping at MTU {link.mtu} ({int(link.mtu) - 28}-byte payload, -M do) to {ping['item']} "
            f"{(ping.get('cmd') or ['?'])[-1]} failed: {why}; both ends and the link need MTU {link.mtu}"
        )
    return problems


def verify_problems(link, sysfs, netdev, pings):
    """After the change (or alone): the live netdev, the RDMA ports, the RoCE v2 GID on every rail, a DF ping to each
    peer."""
    indexes = gid_indexes(sysfs, link.port_dir, link.gid)
    return (
        live_problems(link, netdev)
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


def bandwidth_problems(runs, floor_gbps, command="ib_write_bw"):
    """(measurements, problems) of one measurement per pair of nodes: each run is {client, server, address, rc,
    stdout, stderr} of `command` sent from client to server's fast-link address; below floor_gbps is a problem."""
    measurements, problems = [], []
    for run in runs:
        path = f"{run['client']} -> {run['server']} ({run['address']})"
        gbps = bw_average_gbps(run.get("stdout") or "") if run.get("rc") == 0 else None
        measurements.append({"client": run["client"], "server": run["server"], "path": path, "gbps": gbps})
        if gbps is None:
            said = (run.get("stderr") or run.get("stdout") or "no output").strip().splitlines()[-1:] or ["no output"]
            problems.append(f"{path}: {command} measured nothing (rc {run.get('rc')}: {said[0]})")
        elif gbps < floor_gbps:
            problems.append(
                f"{path}: {gbps:g} Gb/s measured by {command}, below the floor of {floor_gbps:g} Gb/s "
                "(roce_network_bandwidth_floor_gbps): a degraded link (cable, transceiver, a CX-7 port trained at a "
                "lower speed) would pass every other check and slow every step of the engine"
            )
    return measurements, problems
