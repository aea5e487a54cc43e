#!/usr/bin/python
"""Ansible module: read a node's RDMA port files and judge its RoCE link (module_utils/roce_checks.py)."""

DOCUMENTATION = r"""
---
module: roce_link
short_description: Judge a node's RoCE link from its RDMA sysfs, its netdev state, its peers and DF pings
description:
  - Reads the RDMA port states and the GID tables (values and types) of every rail from sysfs on the node;
    unreadable entries (a real CX-7's unused GIDs) are skipped.
  - C(stage=precheck) lists what is wrong before any change (inputs, every rail's netdev, RDMA ports, GID table,
    netplan binary, peers' addresses, subnets and MTUs); C(stage=verify) lists what is wrong with the live link (every
    rail's MTU, state and address, RDMA ports ACTIVE, the RoCE v2 GID of each rail's address at one index, DF pings).
  - The twins' own settings, and how they agree across the nodes, are roce_rails' to judge.
  - Every problem names the node, the value and what was expected. Changes nothing.
options:
  stage:
    description: Which checks to run.
    type: str
    choices: [precheck, verify]
    required: true
  link:
    description: The node's link settings as the inventory gives them (bad values are reported, not fatal).
    type: dict
    required: true
    suboptions:
      node:
        description: The inventory name that starts every problem.
        type: str
        required: true
      address:
        description: The fast-link IPv4 address.
        type: raw
        required: true
      prefix_length:
        description: Its prefix length.
        type: raw
        required: true
      mtu:
        description: The wanted MTU.
        type: raw
        required: true
      interface:
        description: The netdev, e.g. C(enp1s0f1np1).
        type: str
        required: true
      rdma_device:
        description: The RDMA device whose GID index NCCL uses, e.g. C(rocep1s0f1).
        type: str
        required: true
      rdma_port:
        description: Its port.
        type: raw
        required: true
      sysfs_root:
        description: Where sysfs is mounted.
        type: str
        default: /sys
      hcas:
        description: The NCCL_IB_HCA entries, the RDMA device's first, then the other rails (C(device:port)).
        type: list
        elements: str
        required: true
      twins:
        description: The rails after the first as roce_rails gives them, each C(device), C(port), C(interface) (its
          netdev) and C(address) (null when the inventory has none).
        type: list
        elements: dict
        default: []
  netdev:
    description: roce_netdev's result for the interface (C(before) = live state, or C(msg)).
    type: dict
    required: true
  twin_netdevs:
    description: roce_netdev's results for the twins' netdevs, a loop's results (each C(item) a twin).
    type: list
    elements: dict
    default: []
  netplan_command:
    description: The netplan binary that must exist (precheck; empty when netplan is not applied).
    type: str
    default: ""
  peers:
    description:
      - Precheck; per peer C(name), C(address) (null when the inventory has none) and C(link) (null, or the peer's
        C(address), C(prefix_length) and C(mtu) as it published them).
    type: list
    elements: dict
    default: []
  pings:
    description: Verify; the DF ping task's loop results, each C(item) a roce_rails target (C(peer), C(rail),
      C(interface), C(address)); the address pinged is the last word of each command.
    type: list
    elements: dict
    default: []
author: spark-serve
"""

EXAMPLES = r"""
- name: Check the link after the change
  roce_link:
    stage: verify
    link:
      node: "{{ inventory_hostname }}"
      address: 192.168.100.10
      prefix_length: 24
      mtu: 9000
      interface: enp1s0f1np1
      rdma_device: rocep1s0f1
      rdma_port: 1
      hcas: [rocep1s0f1:1]
    netdev: "{{ probed_netdev }}"
    pings: "{{ pings.results }}"
"""

RETURN = r"""
problems:
  description: Every problem found, one line each, starting with the node's name.
  returned: always
  type: list
  elements: str
ready:
  description: Every RDMA port ACTIVE and the RoCE v2 GID of every rail's address (what a fresh address waits for).
  returned: always
  type: bool
gid:
  description: The RoCE v2 GID of the address (its IPv4-mapped IPv6 address), or "" when the address is invalid.
  returned: always
  type: str
  sample: "0000:0000:0000:0000:0000:ffff:c0a8:640a"
gid_index:
  description: The lowest GID index holding that GID as RoCE v2 (NCCL_IB_GID_INDEX), or null.
  returned: always
  type: int
subnet:
  description: The fast link's network with its prefix, or null when address or prefix is invalid.
  returned: always
  type: str
  sample: 192.168.100.0/24
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.roce_checks import Link, gid_indexes, precheck_problems, ready, verify_problems

LINK_OPTIONS = {
    "node": {"type": "str", "required": True},
    "address": {"type": "raw", "required": True},
    "prefix_length": {"type": "raw", "required": True},
    "mtu": {"type": "raw", "required": True},
    "interface": {"type": "str", "required": True},
    "rdma_device": {"type": "str", "required": True},
    "rdma_port": {"type": "raw", "required": True},
    "sysfs_root": {"type": "str", "default": "/sys"},
    "hcas": {"type": "list", "elements": "str", "required": True},
    "twins": {"type": "list", "elements": "dict", "default": []},
}


def first_line(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.readline().rstrip("\n")
    except OSError:  # a CX-7's unused GID entries fail to read (EINVAL)
        return None


def read_sysfs(files, dirs):
    """{path: first line} of every readable file, and of every readable entry of each directory."""
    paths = list(files)
    for directory in dirs:
        try:
            paths += [os.path.join(directory, name) for name in sorted(os.listdir(directory))]
        except OSError:
            continue
    values = {path: first_line(path) for path in paths}
    return {path: value for path, value in values.items() if value is not None}


def main():
    module = AnsibleModule(
        argument_spec={
            "stage": {"type": "str", "choices": ["precheck", "verify"], "required": True},
            "link": {"type": "dict", "required": True, "options": LINK_OPTIONS},
            "netdev": {"type": "dict", "required": True},
            "twin_netdevs": {"type": "list", "elements": "dict", "default": []},
            "netplan_command": {"type": "str", "default": ""},
            "peers": {"type": "list", "elements": "dict", "default": []},
            "pings": {"type": "list", "elements": "dict", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    link = Link(p["link"])
    sysfs = read_sysfs(*link.probe_paths())
    indexes = gid_indexes(sysfs, link.port_dir, link.gid)
    netdevs = {link.interface: p["netdev"], **{r["item"]["interface"]: r for r in p["twin_netdevs"]}}
    if p["stage"] == "precheck":
        missing = p["netplan_command"] if p["netplan_command"] and not os.path.exists(p["netplan_command"]) else ""
        problems = precheck_problems(link, sysfs, netdevs, p["peers"], missing)
    else:
        problems = verify_problems(link, sysfs, netdevs, p["pings"])
    module.exit_json(
        changed=False,
        problems=problems,
        ready=ready(link, sysfs, indexes),
        gid=link.gid,
        gid_index=indexes[0] if indexes else None,
        subnet=link.subnet,
    )


if __name__ == "__main__":
    main()
