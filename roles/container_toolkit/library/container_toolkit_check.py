#!/usr/bin/python
"""Ansible module: judge the toolkit packages, nvidia-ctk and the Docker daemon container_toolkit's probes read
(module_utils/toolkit_checks.py)."""

DOCUMENTATION = r"""
---
module: container_toolkit_check
short_description: Judge a node's NVIDIA Container Toolkit packages, nvidia-ctk and the running Docker daemon's runtimes
description:
  - Lists what is wrong, one line each starting with the node's name, from the results of C(dpkg-query) for the
    toolkit packages, of C(nvidia-ctk --version) and of community.docker.docker_host_info (a package not at the
    version the role installs - the pin, or the newer one the node had, as container_toolkit_target chooses it -
    nvidia-ctk not at its upstream version, no nvidia runtime in the running daemon, another default runtime).
  - Reads nothing itself; changes nothing.
options:
  node:
    description: The inventory name that starts every problem.
    type: str
    required: true
  packages:
    description: The toolkit packages, each of which must be installed at I(version).
    type: list
    elements: str
    required: true
  version:
    description: The pinned Debian version of the packages (container_toolkit_version); the packages must all be at
      it, or at the newest version installed when that is newer (kept). nvidia-ctk reports the upstream part of that
      version, C(~) as C(-). One that is not a Debian version is refused, by name.
    type: str
    required: true
  runtime_name:
    description: The runtime the running daemon must have.
    type: str
    required: true
  default_runtime:
    description: Whether that runtime must be the daemon's default.
    type: bool
    required: true
  dpkg:
    description: The result of C(dpkg-query --showformat='${Package} ${db:Status-Status} ${Version}\n') for the
      packages.
    type: dict
    required: true
  ctk:
    description: The result of C(nvidia-ctk --version).
    type: dict
    required: true
  docker_info:
    description: The result of community.docker.docker_host_info (its C(host_info)), or its failure.
    type: dict
    required: true
extends_documentation_fragment:
  - read_only
author:
  - spark-serve
"""

EXAMPLES = r"""
- name: Judge the toolkit and the daemon
  container_toolkit_check:
    node: "{{ inventory_hostname }}"
    packages: [nvidia-container-toolkit, nvidia-container-toolkit-base]
    version: 1.17.8-1
    runtime_name: nvidia
    default_runtime: false
    dpkg: "{{ dpkg }}"
    ctk: "{{ ctk }}"
    docker_info: "{{ docker_info }}"
  register: toolkit
"""

RETURN = r"""
problems:
  description: Every problem found, one line each, starting with the node's name.
  returned: always
  type: list
  elements: str
summary:
  description: One line with nvidia-ctk's version and the daemon's runtimes and default runtime.
  returned: always
  type: str
  sample: "node-0: nvidia-ctk 1.17.8, Docker runtimes io.containerd.runc.v2, nvidia, runc (default runc)"
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.toolkit_checks import toolkit_verdict, version_problem


def main():
    module = AnsibleModule(
        argument_spec={
            "node": {"type": "str", "required": True},
            "packages": {"type": "list", "elements": "str", "required": True},
            "version": {"type": "str", "required": True},
            "runtime_name": {"type": "str", "required": True},
            "default_runtime": {"type": "bool", "required": True},
            "dpkg": {"type": "dict", "required": True},
            "ctk": {"type": "dict", "required": True},
            "docker_info": {"type": "dict", "required": True},
        },
        supports_check_mode=True,
    )
    problem = version_problem("container_toolkit_version", module.params["version"])
    if problem:
        module.fail_json(msg=f"{module.params['node']}: {problem}")
    problems, summary = toolkit_verdict(module.params)
    module.exit_json(changed=False, problems=problems, summary=summary)


if __name__ == "__main__":
    main()
