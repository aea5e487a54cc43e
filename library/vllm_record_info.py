#!/usr/bin/python
"""Ansible module: read deployment records and find the last one that passed the gate."""

DOCUMENTATION = r"""
---
module: vllm_record_info
short_description: Find vLLM deployment records, the last one that passed, and the one to roll back to
description:
  - Reads every C(<dir>/*.json) record written by vllm_record (read-only; supports check mode). A record that
    cannot be read (truncated by a crash elsewhere) is named in C(unreadable) and a warning, and skipped.
  - Returns the newest record that passed the acceptance gate and the newest record whatever its status, for one
    inventory when I(inventory) is given, and the record a rollback restores.
options:
  dir:
    description: Records directory on the controller.
    type: path
    required: true
  inventory:
    description: Only records of this inventory.
    type: str
  image_ref:
    description: Only starts of this image (the profile's image.ref) for C(last_timed_start) (the stage budgets of
      the staged start).
    type: str
  restore:
    description:
      - Id of the record a rollback restores (C(-e spark_serve_rollback_to=<id>)); it must be a passed record of
        I(inventory), else the module fails naming the id and the newest passed ones.
      - Empty, the rollback restores the newest passed record that runs another deployment than I(running).
    type: str
    default: ""
  running:
    description: Id of the record whose ranks run now (the head's C(running.json)), or empty.
    type: str
    default: ""
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
rollback_target:
  description: The record a rollback restores (I(restore), else the newest passed one of another deployment than
    I(running)), with C(restore_overlays) like I(last_passed) and C(overlay_problems), each stored text that is
    missing or does not hash to the record's C(sha256) (the restore refuses it); null when there is none (see
    C(rollback_problem)).
  returned: always
  type: dict
rollback_problem:
  description: Why there is no rollback target, or empty.
  returned: always
  type: str
last_timed_start:
  description: Id and timeline (C(timings)) of the newest passing record whose start reached ready (of
    I(image_ref) when given), or null; the staged start's stage budgets come from it.
  returned: always
  type: dict
latest:
  description: The newest record of the inventory whatever its status (what was deployed last), or null.
  returned: always
  type: dict
records:
  description: Id, kind, status and inventory of every readable record (of every inventory), oldest first.
  returned: always
  type: list
  elements: dict
unreadable:
  description: C(path) and C(error) of every record file that could not be read; they were skipped.
  returned: always
  type: list
  elements: dict
"""

import glob
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.deploy_record import (
    last_passed,
    last_timed_start,
    read_records,
    rollback_target,
    stored_text_problem,
)


def with_overlays(record, folder):
    """The record with its overlays as (stored text, destination) pairs, ready to mount again, and why any stored
    text is not the one the record names (missing, or another text under its name)."""
    if record is None:
        return None
    stored = [
        {"src": os.path.join(folder, "overlays", o["sha256"]), "dest": o["dest"], "sha256": o["sha256"]}
        for o in record.get("overlays", [])
    ]
    problems = [p for p in (stored_text_problem(o["src"], o["sha256"]) for o in stored) if p]
    mounts = [{"src": o["src"], "dest": o["dest"]} for o in stored]
    return dict(record, restore_overlays=mounts, overlay_problems=problems)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dir=dict(type="path", required=True),
            inventory=dict(type="str"),
            image_ref=dict(type="str"),
            restore=dict(type="str", default=""),
            running=dict(type="str", default=""),
        ),
        supports_check_mode=True,
    )
    params = module.params
    records, unreadable = read_records(sorted(glob.glob(os.path.join(params["dir"], "*.json"))))
    for bad in unreadable:
        module.warn(f"record {bad['path']} is unreadable and was skipped: {bad['error']}")
    target, problem = rollback_target(records, params["inventory"], params["restore"], params["running"])
    if params["restore"] and target is None:
        module.fail_json(msg=f"{problem}; nothing was changed", unreadable=unreadable)
    mine = [r for r in records if params["inventory"] in (None, r.get("inventory"))]
    timed = last_timed_start(records, params["inventory"], params["image_ref"])
    module.exit_json(
        changed=False,
        last_passed=with_overlays(last_passed(records, params["inventory"]), params["dir"]),
        rollback_target=with_overlays(target, params["dir"]),
        rollback_problem=problem,
        last_timed_start={"record": timed["id"], "timings": timed["timings"]} if timed else None,
        latest=max(mine, key=lambda r: r["id"], default=None),
        records=[{key: r.get(key) for key in ("id", "kind", "status", "inventory")} for r in records],
        unreadable=unreadable,
    )


if __name__ == "__main__":
    main()
