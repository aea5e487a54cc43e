#!/usr/bin/python
"""Ansible module: judge the fast link's measured bandwidth between every pair of nodes."""

DOCUMENTATION = r"""
---
module: roce_bandwidth
short_description: Judge ib_write_bw runs between every pair of nodes against a bandwidth floor
description:
  - Reads perftest's C(BW average[Gb/sec]) from each client run of C(ib_write_bw --report_gbits) and holds it to
    O(floor_gbps) (module_utils/roce_checks.py). A run that measured nothing is a problem too.
  - Every problem names both nodes, the server's address and the measured rate. Changes nothing; runs anywhere.
options:
  runs:
    description: One run per pair of nodes, C(client), C(server), C(address) (the server's fast-link address),
      and the client's C(rc), C(stdout) and C(stderr).
    type: list
    elements: dict
    required: true
  floor_gbps:
    description: The lowest acceptable average, in Gb/s.
    type: float
    required: true
  command:
    description: The measuring command, as problems name it.
    type: str
    default: ib_write_bw
extends_documentation_fragment:
  - read_only
author:
  - spark-serve
"""

EXAMPLES = r"""
- name: Judge the measured bandwidth
  roce_bandwidth:
    runs: "{{ roce_network_bandwidth_runs }}"
    floor_gbps: 90
  register: bandwidth
"""

RETURN = r"""
measurements:
  description: C(client), C(server), C(path) (C(client -> server (address))) and C(gbps) (null when nothing was
    measured) of every run.
  returned: always
  type: list
  elements: dict
problems:
  description: One line per pair below the floor or not measured.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.roce_checks import bandwidth_problems


def main():
    module = AnsibleModule(
        argument_spec=dict(
            runs=dict(type="list", elements="dict", required=True),
            floor_gbps=dict(type="float", required=True),
            command=dict(type="str", default="ib_write_bw"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    measurements, problems = bandwidth_problems(p["runs"], p["floor_gbps"], p["command"])
    module.exit_json(changed=False, measurements=measurements, problems=problems)


if __name__ == "__main__":
    main()
