#!/usr/bin/python
"""Ansible module: the version container_toolkit installs the toolkit packages at, from what dpkg has before the
install (module_utils/toolkit_checks.py)."""

DOCUMENTATION = r"""
---
module: container_toolkit_target
short_description: Choose the NVIDIA Container Toolkit version a node is to have, never a downgrade
description:
  - From the result of C(dpkg-query) for the toolkit packages before the install, the version every package is to
    be at - the pin, or the newest version installed when that is newer (in Debian's version order, as
    C(dpkg --compare-versions) sorts). A newer toolkit, which a DGX OS update brings, is kept, never downgraded.
  - Sets the fact C(container_toolkit_installed_version) to it and says, in C(msg), which package moves from what.
  - Reads nothing itself; changes nothing.
options:
  node:
    description: The inventory name that starts C(msg).
    type: str
    required: true
  packages:
    description: The toolkit packages, all installed at one version.
    type: list
    elements: str
    required: true
  version:
    description: The pinned Debian version of the packages (container_toolkit_version); one that is not a Debian
      version is refused, by name.
    type: str
    required: true
  dpkg:
    description: The result of C(dpkg-query --showformat='${Package} ${db:Status-Status} ${Version}\n') for the
      packages.
    type: dict
    required: true
extends_documentation_fragment:
  - read_only
author:
  - spark-serve
"""

EXAMPLES = r"""
- name: Choose the toolkit version
  container_toolkit_target:
    node: "{{ inventory_hostname }}"
    packages: [nvidia-container-toolkit, nvidia-container-toolkit-base]
    version: 1.17.8-1
    dpkg: "{{ dpkg }}"
  register: toolkit
"""

RETURN = r"""
version:
  description: The version every toolkit package is to be at (the pin, or the newer one installed).
  returned: success
  type: str
  sample: 1.18.1-1
kept:
  description: Whether that is a newer version than the pin that the node had.
  returned: success
  type: bool
ansible_facts:
  description: The node's facts this sets.
  returned: success
  type: dict
  contains:
    container_toolkit_installed_version:
      description: The version the toolkit packages are at once the role has run (in check mode, would be).
      type: str
      sample: 1.18.1-1
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.toolkit_checks import toolkit_target, version_problem


def main():
    module = AnsibleModule(
        argument_spec={
            "node": {"type": "str", "required": True},
            "packages": {"type": "list", "elements": "str", "required": True},
            "version": {"type": "str", "required": True},
            "dpkg": {"type": "dict", "required": True},
        },
        supports_check_mode=True,
    )
    problem = version_problem("container_toolkit_version", module.params["version"])
    if problem:
        module.fail_json(msg=f"{module.params['node']}: {problem}")
    version, kept, msg = toolkit_target(module.params)
    module.exit_json(
        changed=False,
        version=version,
        kept=kept,
        msg=msg,
        ansible_facts={"container_toolkit_installed_version": version},
    )


if __name__ == "__main__":
    main()
