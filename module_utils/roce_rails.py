"""Every node's RoCE rails, judged together before any node changes: the CX-7 netdev of roce_network_address, then each
twin of roce_network_nccl_ib_hca_twins on the netdev roce_network_twin_interfaces names, at the address
roce_network_twin_addresses gives it. Pure: no Ansible imports; roles/roce_network/library/roce_rails.py calls judge().

Each rail of a node has an address of its own on a subnet of its own, as NVIDIA's two-Spark bandwidth guide sets up
the two RoCE functions of a CX-7 port (192.168.200.0/24 and 192.168.201.0/24): two netdevs of one node on one subnet
leave the kernel one route for both, and the twin's traffic would leave by the other netdev. A rail joins the nodes
over one subnet. Every problem names the node, the variable, its value and the rule.
"""

from ansible.module_utils.roce_checks import HCA, ipv4_address, subnet

EXAMPLE = "roce_network_twin_addresses: {roceP2p1s0f1: 192.168.200.10}"


def primary_rail(node):
    """The rail of roce_network_address: the RDMA device whose GID index NCCL uses, on roce_network_interface."""
    return {
        "device": str(node["rdma_device"]),
        "port": str(node["rdma_port"]),
        "interface": str(node["interface"]),
        "address": node["address"],
    }


def twin_rails(node):
    """(rails, problems) of the node's twins, in roce_network_nccl_ib_hca_twins' order. A twin whose entry or netdev
    cannot be read is left out (and named); one without a good address is kept, so that its port and netdev are still
    checked (address_problems names the address)."""
    name, rails, problems = node["node"], [], []
    addresses, interfaces = node["twin_addresses"], node["twin_interfaces"]
    if not isinstance(addresses, dict):
        problems.append(
            f"{name}: roce_network_twin_addresses={addresses!r} is not a mapping (rule: one address per twin RDMA "
            f"device, e.g. {EXAMPLE})"
        )
    for hca in node["twins"]:
        match = HCA.match(str(hca))
        if not match:
            problems.append(
                f'{name}: roce_network_nccl_ib_hca_twins entry "{hca}" is not "device:port" (rule: an NCCL_IB_HCA '
                "entry, e.g. roceP2p1s0f1:1)"
            )
            continue
        device, port = match.groups()
        interface = interfaces.get(device) if isinstance(interfaces, dict) else None
        if not interface:
            problems.append(
                f"{name}: roce_network_twin_interfaces has no netdev for {device} (rule: the twin's address goes on "
                f"its netdev, the one ibdev2netdev shows as {device} port {port} ==> <netdev>)"
            )
            continue
        address = addresses.get(device) if isinstance(addresses, dict) else None
        rails.append({"device": device, "port": port, "interface": str(interface), "address": address})
    return rails, problems


def missing_address(node, rail):
    addresses = node["twin_addresses"]
    named = ", ".join(sorted(map(str, addresses))) if isinstance(addresses, dict) else ""
    return (
        f"{node['node']}: roce_network_twin_addresses has no address for {rail['device']}"
        f"{f' (it names {named})' if named else ''} (rule: every twin of roce_network_nccl_ib_hca_twins gets an "
        f"address of its own on {rail['interface']}, on a subnet of its own, under the host in hosts.yml: {EXAMPLE})"
    )


def address_problems(node, rails):
    """{device: problem} of each twin whose address is missing, not a bare IPv4 address, or on a subnet another rail
    of the node is on."""
    length, problems = node["prefix_length"], {}
    taken = {subnet(rails[0]["address"], length): f"roce_network_address {rails[0]['address']}"}
    for rail in rails[1:]:
        field = f"roce_network_twin_addresses.{rail['device']}={rail['address']}"
        network = subnet(rail["address"], length) if ipv4_address(rail["address"]) else None
        if rail["address"] is None:
            problems[rail["device"]] = missing_address(node, rail)
        elif ipv4_address(rail["address"]) is None:
            problems[rail["device"]] = (
                f"{node['node']}: {field} is not an IPv4 address (rule: a bare dotted quad, as roce_network_address)"
            )
        elif network and network in taken:
            problems[rail["device"]] = (
                f"{node['node']}: {field} is on {network}, the subnet of {taken[network]} (rule: each rail of a node "
                "on a subnet of its own: two netdevs on one subnet share one route, and the twin's traffic would "
                "leave by the other netdev)"
            )
        elif network:
            taken[network] = f"roce_network_twin_addresses.{rail['device']} {rail['address']}"
    return problems


def twins_alike_problems(nodes):
    """Every node runs the first node's twins: each rail is measured, and used by NCCL, between every pair."""
    first = nodes[0]
    return {
        node["node"]: [
            f"{node['node']}: roce_network_nccl_ib_hca_twins {node['twins']} differs from {first['node']}'s "
            f"{first['twins']} (rule: every node runs the same rails, each measured between every pair of nodes)"
        ]
        for node in nodes[1:]
        if [str(hca) for hca in node["twins"]] != [str(hca) for hca in first["twins"]]
    }


def rail_problems(nodes, rails, device, faulted):
    """{node: problems} of one twin rail across the nodes: one subnet (the first good address sets it), no address
    twice. `faulted`: the (node, device) whose address address_problems named already."""
    problems, owners, first = {}, {}, None
    for node in nodes:
        rail = next((r for r in rails[node["node"]][1:] if r["device"] == device), None)
        network = subnet(rail["address"], node["prefix_length"]) if rail else None
        if network is None or (node["node"], device) in faulted:
            continue  # no such rail (twins_alike_problems), or its address is named already
        field = f"roce_network_twin_addresses.{device}={rail['address']}"
        if rail["address"] in owners:
            problems[node["node"]] = [
                f"{node['node']}: {field} is also {owners[rail['address']]}'s (rule: one address per node on a rail)"
            ]
        elif first and network != first[0]:
            problems[node["node"]] = [
                f"{node['node']}: {field}/{node['prefix_length']} is not on {first[1]}'s subnet {first[0]} of rail "
                f"{device} (rule: the nodes reach each other on a rail over one subnet)"
            ]
        owners.setdefault(rail["address"], node["node"])
        first = first or (network, node["node"])
    return problems


def ping_targets(node, rails):
    """The DF pings a node sends: each peer on each of the node's rails ({peer, rail, interface, address}). A peer
    that was not judged (not in the play) is pinged on the first rail only, at its inventory address."""
    targets = []
    for peer in node["peers"]:
        theirs = rails.get(peer["name"]) or [{"address": peer["address"]}]
        for rail, their in zip(rails[node["node"]], theirs, strict=False):
            targets.append(
                {
                    "peer": peer["name"],
                    "rail": rail["device"],
                    "interface": rail["interface"],
                    "address": their["address"],
                }
            )
    return targets


def judge(nodes):
    """{rails, targets, node_problems, problems} of every node. `nodes`: one dict per node with node, address,
    prefix_length, interface, rdma_device, rdma_port (its first rail), twins (its NCCL_IB_HCA entries after the first),
    twin_addresses, twin_interfaces (as the inventory gives them) and peers ([{name, address}])."""
    rails, node_problems, faulted = {}, {}, set()
    for node in nodes:
        twins, problems = twin_rails(node)
        rails[node["node"]] = [primary_rail(node), *twins]
        addresses = address_problems(node, rails[node["node"]])
        node_problems[node["node"]] = problems + list(addresses.values())
        faulted |= {(node["node"], device) for device in addresses}
    if nodes:
        found = [twins_alike_problems(nodes)]
        found += [rail_problems(nodes, rails, rail["device"], faulted) for rail in rails[nodes[0]["node"]][1:]]
        for problems in found:
            for name, lines in problems.items():
                node_problems[name] += lines
    return {
        "rails": rails,
        "targets": {node["node"]: ping_targets(node, rails) for node in nodes},
        "node_problems": node_problems,
        "problems": [problem for node in nodes for problem in node_problems[node["node"]]],
    }
