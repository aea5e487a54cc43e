#!/usr/bin/python
"""Ansible module: read the door's key files on the controller and judge them (module_utils/door_keys.py)."""

DOCUMENTATION = r"""
---
module: front_door_keys
short_description: The front door's keys as SHA-256 digests, one per tenant, with every violation at once
description:
  - Reads the operator's key file and every tenant's key file on the controller (run it there, C(delegate_to)
    localhost) and returns each key's SHA-256 digest with the tenant's name and limits, the form the door compares.
  - Lists every violation at once, each naming the field, the value and the rule (a missing or malformed key file,
    a bad or reserved or repeated name, a negative limit, two tenants with one key). Changes nothing.
  - Its result holds digests of keys, so register it under C(no_log).
options:
  api_key_file:
    description: The operator's key file (the tenant C(operator), no limits); empty for none.
    type: str
    default: ""
  tenants:
    description: The named tenants (roles/front_door's C(front_door_tenants)); shapes are checked by the role's spec.
    type: list
    elements: dict
    default: []
  admin_key_file:
    description:
      - A router's admin key file (empty for none). Its holder may call the admin API for any replica URL; each of
        I(admin_members) gets a credential derived from it that covers its own URL only.
    type: str
    default: ""
  admin_members:
    description: The replicas' door URLs whose heads may add or remove themselves (https:// only).
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - read_only
author:
  - spark-serve
"""

EXAMPLES = r"""
- name: Judge the door's keys
  front_door_keys:
    api_key_file: "{{ front_door_api_key_file }}"
    tenants: "{{ front_door_tenants }}"
  delegate_to: localhost
  no_log: true
  register: front_door_keys
"""

RETURN = r"""
entries:
  description: The door's entries, the operator first; per entry C(name), C(sha256) and the three limits.
  returned: always
  type: list
  elements: dict
admin_entries:
  description:
    - The admin API's entries; per entry C(sha256) (a credential's digest) and C(scope) (C(*) for the admin key, else
      the one replica URL it may add or remove). Empty without I(admin_key_file).
  returned: always
  type: list
  elements: dict
revoked:
  description: The names of the revoked tenants (their keys no longer pass).
  returned: always
  type: list
  elements: str
violations:
  description: One line per violation, naming the field, the value and the rule; empty when the keys are usable.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.door_keys import admin_entries, door_keys


def read_text(path):
    try:
        with open(path, encoding="utf-8") as key:
            return key.read()
    except (OSError, TypeError, UnicodeDecodeError):
        return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            api_key_file=dict(type="str", default=""),
            tenants=dict(type="list", elements="dict", default=[]),
            admin_key_file=dict(type="str", default=""),
            admin_members=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )
    api_key_file, tenants = module.params["api_key_file"], module.params["tenants"]
    entries, revoked, violations = door_keys(
        api_key_file,
        read_text(api_key_file) if api_key_file else None,
        tenants,
        [None if tenant.get("revoked") else read_text(tenant.get("key_file")) for tenant in tenants],
    )
    admin_key_file = module.params["admin_key_file"]
    admin, admin_violations = (
        admin_entries(admin_key_file, read_text(admin_key_file), module.params["admin_members"])
        if admin_key_file
        else ([], [])
    )
    module.exit_json(
        changed=False, entries=entries, admin_entries=admin, revoked=revoked, violations=violations + admin_violations
    )


if __name__ == "__main__":
    main()
