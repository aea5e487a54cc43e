#!/usr/bin/python
"""Ansible module: converge the live state of a netdev (MTU, link up, one IPv4 address) with iproute2."""

DOCUMENTATION = r"""
---
module: roce_netdev
short_description: Converge the live MTU, link state and IPv4 address of a netdev with iproute2
description:
  - Reads the live state with C(ip -j addr show dev DEV) (MTU, flags and addresses in one probe) and runs
    C(ip) commands only for what differs, so a converged link reports no change.
  - Works the same whether or not a network daemon (systemd-networkd, NetworkManager via netplan) manages
    the link; persistence is the caller's business (roce_network writes a netplan file).
  - The address is exclusive on the link; other IPv4 addresses on it are removed (IPv6 is left alone).
  - Supports check mode (reports the commands it would run) and diff (live state before and after).
options:
  device:
    description: Netdev name, e.g. C(enp1s0f1np1).
    type: str
    required: true
  mtu:
    description: Wanted MTU.
    type: int
    required: true
  address:
    description: Wanted IPv4 address (without prefix).
    type: str
    required: true
  prefix_length:
    description: Prefix length of O(address).
    type: int
    required: true
author: spark-serve
"""

EXAMPLES = r"""
- name: Converge the CX-7 netdev
  roce_netdev:
    device: enp1s0f1np1
    mtu: 9000
    address: 192.168.100.10
    prefix_length: 24
"""

RETURN = r"""
before:
  description: Live state before (C(mtu), C(up), C(operstate), C(ipv4) as C(address/prefix) strings).
  returned: success
  type: dict
after:
  description: Live state after (or, in check mode, the state the commands would produce).
  returned: success
  type: dict
commands:
  description: The C(ip) commands run (or that would run in check mode).
  returned: success
  type: list
  elements: list
  sample: [["/usr/sbin/ip", "link", "set", "dev", "enp1s0f1np1", "mtu", "9000"]]
rc:
  description: Exit code of C(ip -j addr show) when the device cannot be read.
  returned: failed
  type: int
  sample: 1
"""

import json

from ansible.module_utils.basic import AnsibleModule


def live_state(module, ip, device):
    rc, out, err = module.run_command([ip, "-j", "addr", "show", "dev", device])
    if rc != 0:
        module.fail_json(msg=f"netdev {device} not found: {(err or out).strip()}", rc=rc)
    link = json.loads(out)[0]
    return {
        "mtu": link.get("mtu"),
        "up": "UP" in link.get("flags", []),
        "operstate": link.get("operstate"),
        "ipv4": [f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info", []) if a.get("family") == "inet"],
    }


def main():
    module = AnsibleModule(
        argument_spec={
            "device": {"type": "str", "required": True},
            "mtu": {"type": "int", "required": True},
            "address": {"type": "str", "required": True},
            "prefix_length": {"type": "int", "required": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    ip = module.get_bin_path("ip", required=True)
    dev, wanted = p["device"], f"{p['address']}/{p['prefix_length']}"
    before = live_state(module, ip, dev)

    commands = []
    if before["mtu"] != p["mtu"]:
        commands.append([ip, "link", "set", "dev", dev, "mtu", str(p["mtu"])])
    # Stale IPv4 addresses would give the RDMA device extra RoCE GIDs and NCCL a second candidate.
    commands += [[ip, "addr", "del", addr, "dev", dev] for addr in before["ipv4"] if addr != wanted]
    if wanted not in before["ipv4"]:
        commands.append([ip, "addr", "add", wanted, "dev", dev])
    if not before["up"]:
        commands.append([ip, "link", "set", "dev", dev, "up"])

    after = dict(before, mtu=p["mtu"], up=True, ipv4=[wanted])
    if commands and not module.check_mode:
        for argv in commands:
            rc, out, err = module.run_command(argv)
            if rc != 0:
                module.fail_json(
                    msg=f"{' '.join(argv)} failed (rc {rc}): {(err or out).strip()}", commands=commands, before=before
                )
        after = live_state(module, ip, dev)

    def text(state):
        return "".join(f"{key}: {state[key]}\n" for key in ("mtu", "up", "ipv4"))

    module.exit_json(
        changed=bool(commands),
        before=before,
        after=after,
        commands=commands,
        diff={
            "before": text(before),
            "after": text(after),
            "before_header": f"{dev} (live)",
            "after_header": f"{dev} (live)",
        },
    )


if __name__ == "__main__":
    main()
