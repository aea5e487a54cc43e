#!/usr/bin/python
"""Ansible module: judge the fast link's bandwidth measured on every rail between every pair of nodes."""

DOCUMENTATION = r"""
---
module: roce_bandwidth
short_description: Judge ib_write_bw runs on every rail between every pair of nodes against a bandwidth floor
description:
  - Reads perftest's C(BW average[Gb/sec]) from each client run of C(ib_write_bw --report_gbits) and holds it to
    O(floor_gbps) (module_utils/roce_checks.py). A run that measured nothing is a problem too.
  - >-
    Every measurement gets its line as the role prints it, e.g.
    C(spark-a -> spark-b rail roceP2p1s0f1 (192.168.200.11): 96.1 Gb/s (floor 80, 4 QPs, 10 s)); every problem names
    both nodes, the rail, the server's address on it and the measured rate. Changes nothing; runs anywhere.
options:
  runs:
    description: One run per rail per pair of nodes, C(client), C(server), C(rail) (the RDMA device measured),
      C(address) (the server's address on that rail), and the client's C(rc), C(stdout) and C(stderr).
    type: list
    elements: dict
    required: true
  floor_gbps:
    description: The lowest acceptable average of one rail, in Gb/s.
    type: float
    required: true
  qps:
    description: The queue pairs each run used (perftest C(--qp)), as the lines name them.
    type: int
    required: true
  seconds:
    description: How long each run sent (perftest C(-D)), as the lines name it.
    type: int
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
    floor_gbps: 80
    qps: 4
    seconds: 10
  register: bandwidth
"""

RETURN = r"""
measurements:
  description: C(client), C(server), C(rail), C(gbps) (null when nothing was measured) and C(line) (the printed
    measurement with the floor, the QPs and the seconds) of every run.
  returned: always
  type: list
  elements: dict
problems:
  description: One line per rail of a pair below the floor or not measured.
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
            qps=dict(type="int", required=True),
            seconds=dict(type="int", required=True),
            command=dict(type="str", default="ib_write_bw"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    measurements, problems = bandwidth_problems(p["runs"], p["floor_gbps"], p["qps"], p["seconds"], p["command"])
    module.exit_json(changed=False, measurements=measurements, problems=problems)


if __name__ == "__main__":
    main()
