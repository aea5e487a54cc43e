#!/usr/bin/python
"""Ansible module: judge the driver package and the running driver nvidia_driver's probes read
(module_utils/driver_checks.py)."""

DOCUMENTATION = r"""
---
module: nvidia_driver_check
short_description: Judge a node's NVIDIA driver package, running driver and GPU from dpkg's and nvidia-smi's output
description:
  - Lists what is wrong, one line each starting with the node's name, from the results of
    C(dpkg-query --showformat='${db:Status-Status} ${Version}\n') for the driver package and of
    C(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader) (the package not installed, off the branch or
    not the pinned version, no GPU, a running driver off the branch, another GPU).
  - A driver package that changed in this run is not loaded yet; the problems with the running driver say to reboot.
  - Reads nothing itself; changes nothing.
options:
  node:
    description: The inventory name that starts every problem.
    type: str
    required: true
  package:
    description: The driver package.
    type: str
    required: true
  branch:
    description: The driver branch (major version) package and running driver must be on.
    type: str
    required: true
  version:
    description: The exact package version wanted; empty for any version on the branch.
    type: str
    default: ""
  expected_gpu:
    description: The GPU name nvidia-smi must report.
    type: str
    required: true
  package_changed:
    description: Whether the driver package changed in this run (the running driver is then the old one).
    type: bool
    default: false
  dpkg:
    description: The result of the dpkg-query task.
    type: dict
    required: true
  smi:
    description: The result of the nvidia-smi task.
    type: dict
    required: true
extends_documentation_fragment:
  - read_only
author:
  - spark-serve
"""

EXAMPLES = r"""
- name: Judge the driver
  nvidia_driver_check:
    node: "{{ inventory_hostname }}"
    package: nvidia-driver-580-open
    branch: "580"
    expected_gpu: NVIDIA GB10
    package_changed: "{{ install is changed }}"
    dpkg: "{{ dpkg }}"
    smi: "{{ smi }}"
  register: driver
"""

RETURN = r"""
problems:
  description: Every problem found, one line each, starting with the node's name.
  returned: always
  type: list
  elements: str
summary:
  description: One line with every GPU and its running driver, and the installed package version.
  returned: always
  type: str
  sample: "node-0: NVIDIA GB10, driver 580.95.05 (nvidia-driver-580-open 580.95.05-0ubuntu1)"
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.driver_checks import driver_verdict


def main():
    module = AnsibleModule(
        argument_spec={
            "node": {"type": "str", "required": True},
            "package": {"type": "str", "required": True},
            "branch": {"type": "str", "required": True},
            "version": {"type": "str", "default": ""},
            "expected_gpu": {"type": "str", "required": True},
            "package_changed": {"type": "bool", "default": False},
            "dpkg": {"type": "dict", "required": True},
            "smi": {"type": "dict", "required": True},
        },
        supports_check_mode=True,
    )
    problems, summary = driver_verdict(module.params)
    module.exit_json(changed=False, problems=problems, summary=summary)


if __name__ == "__main__":
    main()
