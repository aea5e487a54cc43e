#!/usr/bin/python
"""Ansible module: judge the router's options on the controller (module_utils/router_checks.py)."""

DOCUMENTATION = r"""
---
module: vllm_router_check
short_description: Every problem with the router's options at once, before the router host changes
description:
  - Checks roles/vllm_router's options on the controller (run it there, C(delegate_to) localhost) - the routing
    policy against the ones vllm-router has, the fleet's CA named, the wheelhouse folder and the replicas' key file
    present - and returns one line per problem, naming the option, the value and the rule. Changes nothing.
options:
  policy:
    description: The routing policy (C(vllm_router_policy)).
    type: str
    required: true
  version:
    description: The pinned vllm-router version, named in a refusal.
    type: str
    required: true
  ca_file:
    description: The CA the replicas' doors are signed by (C(vllm_router_ca_file)); empty is refused.
    type: str
    default: ""
  wheelhouse:
    description: A folder of wheels on the controller (C(vllm_router_wheelhouse)); empty for the package index.
    type: str
    default: ""
  api_key_file:
    description: The replicas' key file on the controller (C(vllm_router_api_key_file)); empty for none.
    type: str
    default: ""
extends_documentation_fragment:
  - read_only
author:
  - spark-serve
"""

EXAMPLES = r"""
- name: Judge the router's options on the controller
  vllm_router_check:
    policy: consistent_hash
    version: "0.1.9"
    ca_file: .spark-serve/front-door/ca.pem
  delegate_to: localhost
  register: vllm_router_checked
"""

RETURN = r"""
problems:
  description: One line per problem, naming the option, the value and the rule; empty when the options are usable.
  returned: always
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.router_checks import router_problems


def main():
    module = AnsibleModule(
        argument_spec=dict(
            policy=dict(type="str", required=True),
            version=dict(type="str", required=True),
            ca_file=dict(type="str", default=""),
            wheelhouse=dict(type="str", default=""),
            api_key_file=dict(type="str", default=""),
        ),
        supports_check_mode=True,
    )
    options = module.params
    found = {
        "wheelhouse": bool(options["wheelhouse"]) and os.path.isdir(options["wheelhouse"]),
        "api_key_file": bool(options["api_key_file"]) and os.path.isfile(options["api_key_file"]),
    }
    module.exit_json(changed=False, problems=router_problems(options, found))


if __name__ == "__main__":
    main()
