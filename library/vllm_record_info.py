#!/usr/bin/python
"""Ansible module: read deployment records and find the last one that passed the gate."""

DOCUMENTATION = r"""
---
module: vllm_record_info
short_description: Find vLLM deployment records, and the last one that passed
description:
  - Reads every C(<dir>/*.json) record written by vllm_record (read-only; supports check mode).
  - Returns the newest record that passed the acceptance gate and the newest record whatever its status, for one
    inventory when I(inventory) is given.
options:
  dir:
    description: Records directory on the controller.
    type: path
    required: true
  inventory:
    description: Only records of this inventory.
    type: str
  image_digest:
    description: Only starts of this image for C(last_timed_start) (the stage budgets of the staged start).
    type: str
author:
  - spark-serve
"""

EXAMPLES = r"""
- name: Find the last good deployment
  vllm_record_info:
    dir: "{{ spark_serve_controller_dir }}/records"
    inventory: spark-pair
  delegate_to: localhost
  register: last_good
"""

RETURN = r"""
last_passed:
  description: The newest passing record (full content), or null. Its C(restore_overlays) list the overlays as
    C(src) (the stored text in C(<dir>/overlays)) and C(dest), ready for a rollback.
  returned: always
  type: dict
last_timed_start:
  description: Id and timeline (C(timings)) of the newest passing record whose start reached ready (of
    I(image_digest) when given), or null; the staged start's stage budgets come from it.
  returned: always
  type: dict
latest:
  description: The newest record of the inventory whatever its status (what was deployed last), or null.
  returned: always
  type: dict
records:
  description: Id, kind, status and inventory of every record (of every inventory), oldest first.
  returned: always
  type: list
  elements: dict
"""

import glob
import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.deploy_record import last_passed, last_timed_start


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dir=dict(type="path", required=True), inventory=dict(type="str"), image_digest=dict(type="str")
        ),
        supports_check_mode=True,
    )
    records = []
    for path in sorted(glob.glob(os.path.join(module.params["dir"], "*.json"))):
        try:
            with open(path, encoding="utf-8") as source:
                records.append(json.load(source))
        except (OSError, ValueError) as err:  # a rollback must not pick a record it cannot read
            module.fail_json(msg=f"record {path} is unreadable: {err}")
    good = last_passed(records, module.params["inventory"])
    if good is not None:
        good["restore_overlays"] = [
            {"src": os.path.join(module.params["dir"], "overlays", o["sha256"]), "dest": o["dest"]}
            for o in good.get("overlays", [])
        ]
    mine = [r for r in records if module.params["inventory"] in (None, r.get("inventory"))]
    timed = last_timed_start(records, module.params["inventory"], module.params["image_digest"])
    module.exit_json(
        changed=False,
        last_passed=good,
        last_timed_start={"record": timed["id"], "timings": timed["timings"]} if timed else None,
        latest=max(mine, key=lambda r: r["id"], default=None),
        records=[{key: r.get(key) for key in ("id", "kind", "status", "inventory")} for r in records],
    )


if __name__ == "__main__":
    main()
