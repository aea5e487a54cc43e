#!/usr/bin/python
"""Ansible module: every node's RoCE rails and what is wrong with them, judged at once (module_utils/roce_rails.py)."""

DOCUMENTATION = r"""
---
module: roce_rails
short_description: Judge every node's RoCE rails (twin netdevs, addresses, subnets) at once, before any node changes
description:
  - Builds each node's rails from what the inventory gives it, the first on O(nodes[].interface) at
    O(nodes[].address), then one per twin of O(nodes[].twins) on the netdev O(nodes[].twin_interfaces) names, at the
    address O(nodes[].twin_addresses) gives it.
  - Lists every problem of every node at once, each naming the node, the variable, its value and the rule a twin
    breaks (an entry that is not C(device:port), no netdev or no address for a twin, an address that is not IPv4 or
    shares a subnet with another rail of its node), and what differs between the nodes (other twins, a rail's
    addresses on more than one subnet or twice).
  - Reads nothing, changes nothing; run once on the controller.
options:
  nodes:
    description: One entry per node of the play.
    type: list
    elements: dict
    required: true
    suboptions:
      node:
        description: The inventory name that starts every problem.
        type: str
        required: true
      address:
        description: Its roce_network_address (null when the inventory has none).
        type: raw
      prefix_length:
        description: The prefix length of every rail's address.
        type: raw
        required: true
      interface:
        description: The first rail's netdev.
        type: str
        required: true
      rdma_device:
        description: The first rail's RDMA device.
        type: str
        required: true
      rdma_port:
        description: Its port.
        type: raw
        required: true
      twins:
        description: The NCCL_IB_HCA entries after the first (C(device:port)).
        type: list
        elements: raw
        required: true
      twin_addresses:
        description: Its address on each twin, by RDMA device (anything else is reported).
        type: raw
        required: true
      twin_interfaces:
        description: The netdev of each twin RDMA device.
        type: raw
        required: true
      peers:
        description: The nodes it pings, each C(name) and C(address) (its roce_network_address, or null).
        type: list
        elements: dict
        required: true
author: spark-serve
"""

EXAMPLES = r"""
- name: Judge every node's rails
  roce_rails:
    nodes:
      - node: spark-a
        address: 192.168.100.10
        prefix_length: 24
        interface: enp1s0f1np1
        rdma_device: rocep1s0f1
        rdma_port: 1
        twins: [roceP2p1s0f1:1]
        twin_addresses: {roceP2p1s0f1: 192.168.200.10}
        twin_interfaces: {roceP2p1s0f1: enP2p1s0f1np1}
        peers: [{name: spark-b, address: 192.168.100.11}]
  delegate_to: localhost
  run_once: true
  register: rails
"""

RETURN = r"""
rails:
  description: Each node's rails by its name, the first rail first, each C(device), C(port), C(interface) and
    C(address); a twin whose entry or netdev cannot be read is left out (and reported).
  returned: always
  type: dict
  sample: {"spark-a": [{"device": "rocep1s0f1", "port": "1", "interface": "enp1s0f1np1", "address": "192.168.100.10"}]}
targets:
  description: Each node's DF pings by its name, each C(peer), C(rail) (its own RDMA device), C(interface) and
    C(address) (the peer's on that rail, or null).
  returned: always
  type: dict
node_problems:
  description: Each node's problems by its name (one line each, starting with the node's name).
  returned: always
  type: dict
problems:
  description: Every node's problems, in the order of O(nodes).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.roce_rails import judge

NODE_OPTIONS = {
    "node": {"type": "str", "required": True},
    "address": {"type": "raw"},
    "prefix_length": {"type": "raw", "required": True},
    "interface": {"type": "str", "required": True},
    "rdma_device": {"type": "str", "required": True},
    "rdma_port": {"type": "raw", "required": True},
    "twins": {"type": "list", "elements": "raw", "required": True},
    "twin_addresses": {"type": "raw", "required": True},
    "twin_interfaces": {"type": "raw", "required": True},
    "peers": {"type": "list", "elements": "dict", "required": True},
}


def main():
    module = AnsibleModule(
        argument_spec={"nodes": {"type": "list", "elements": "dict", "required": True, "options": NODE_OPTIONS}},
        supports_check_mode=True,
    )
    module.exit_json(changed=False, **judge(module.params["nodes"]))


if __name__ == "__main__":
    main()
