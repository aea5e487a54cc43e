#!/usr/bin/python
"""Ansible module: judge every node's hf_model inputs at once (module_utils/model_checks.py)."""

DOCUMENTATION = r"""
---
module: hf_model_inputs
short_description: Judge every node's model inputs and that every node is given the same model
description:
  - Lists, in play order, what is wrong with each node's inputs (repo not C(org/name), a revision that is not a commit,
    a relative cache folder, an image neither digest-pinned nor built by engine_image, a download host outside the
    play, no fast-link address, fewer than one download attempt), and every node whose model, revision, cache, image or
    download host differ from the first node's. One line each, starting with the node's name.
  - Run once for the play; reads nothing itself, changes nothing.
options:
  hosts:
    description: The nodes to judge, in play order (the first is the one the others must match).
    type: list
    elements: str
    required: true
  requests:
    description:
      - Each node's inputs by inventory name (C(repo), C(revision), C(cache_dir), C(image), C(download_host),
        C(peer_address), C(download_attempts)).
    type: dict
    required: true
  play_hosts:
    description: Every host of the play, one of which must be each node's download host.
    type: list
    elements: str
    required: true
extends_documentation_fragment:
  - read_only
author:
  - spark-serve
"""

EXAMPLES = r"""
- name: Judge every node's model inputs
  hf_model_inputs:
    hosts: "{{ ansible_play_hosts }}"
    requests: "{{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, 'request'))) }}"
    play_hosts: "{{ ansible_play_hosts_all }}"
  run_once: true
  register: inputs
"""

RETURN = r"""
problems:
  description: Every problem found, one line each, starting with the node's name.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.model_checks import request_problems


def main():
    module = AnsibleModule(
        argument_spec={
            "hosts": {"type": "list", "elements": "str", "required": True},
            "requests": {"type": "dict", "required": True},
            "play_hosts": {"type": "list", "elements": "str", "required": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    module.exit_json(changed=False, problems=request_problems(p["hosts"], p["requests"], p["play_hosts"]))


if __name__ == "__main__":
    main()
