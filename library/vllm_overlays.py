#!/usr/bin/python
"""Ansible module: check overlay files against the files they replace inside the pinned engine image."""

DOCUMENTATION = r"""
---
module: vllm_overlays
short_description: Check vLLM overlay files against the pinned image before anything starts
description:
  - Reads, from the local image (without running it), the file each overlay is mounted over, and checks that
    the overlay still defines every top-level name and class member that file defines (seed 000's stale
    overlay lacked C(validate_environ) and killed the worker at import).
  - Fails listing every violation at once (field, files, rule). Overlays whose code equals the image's file are
    reported as obsolete (a warning, not a failure).
  - Read-only on the node (a created, never started container is removed again); supports check mode.
options:
  image:
    description:
      - Image reference, pinned by digest (C(name@sha256:...)).
      - Omitted, the overlays are only described (C(overlays)), not checked; playbooks/validate.yml renders the spec
        this way on the controller, which has no engine image.
    type: str
  overlays:
    description: Overlays in profile order.
    type: list
    elements: dict
    required: true
    suboptions:
      src:
        description: Name of the overlay on the controller (used in messages).
        type: str
        required: true
      dest:
        description: Absolute path of the replaced file inside the image.
        type: str
        required: true
      content:
        description: The overlay's text.
        type: str
        required: true
author:
  - spark-serve
"""

EXAMPLES = r"""
- name: Check overlays against the image
  vllm_overlays:
    image: registry.local:5000/spark-serve/vllm-gb10@sha256:0123...
    overlays:
      - src: overlays/platforms_interface.py
        dest: /usr/local/lib/python3.12/dist-packages/vllm/platforms/interface.py
        content: "{{ lookup('ansible.builtin.file', 'overlays/platforms_interface.py') }}"
"""

RETURN = r"""
overlays:
  description: The overlays without their text, each with C(sha256) of the text and C(name), the file name to
    mount it from (position and base name, so two overlays with the same base name do not collide).
  returned: always
  type: list
  elements: dict
obsolete:
  description: One line per overlay whose code the image already ships.
  returned: always
  type: list
  elements: str
checked:
  description: Number of overlays checked.
  returned: always
  type: int
errors:
  description: Every violation, each naming the overlay (C(overlays[N])), its files and the rule it breaks.
  returned: failed
  type: list
  elements: str
  sample:
    - "overlays[0] (overlays/interface.py -> /vllm/platforms/interface.py): lacks 1 name(s) the image's file
      defines: Platform.validate_environ; rule: ..."
"""

import hashlib
import io
import os
import tarfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.overlay_check import check_overlay


def image_file(module, container, path):
    """Text of `path` inside the created container, or None when the image has no such file."""
    rc, out, _ = module.run_command(["docker", "cp", f"{container}:{path}", "-"], binary_data=True, encoding=None)
    if rc != 0:
        return None
    with tarfile.open(fileobj=io.BytesIO(out)) as archive:
        member = archive.next()
        if member is None or not member.isfile():
            return None
        return archive.extractfile(member).read().decode("utf-8", errors="replace")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            image=dict(type="str"),
            overlays=dict(
                type="list",
                elements="dict",
                required=True,
                options=dict(
                    src=dict(type="str", required=True),
                    dest=dict(type="str", required=True),
                    content=dict(type="str", required=True, no_log=False),
                ),
            ),
        ),
        supports_check_mode=True,
    )
    overlays = module.params["overlays"]
    described = [
        {
            "src": overlay["src"],
            "dest": overlay["dest"],
            "sha256": hashlib.sha256(overlay["content"].encode()).hexdigest(),
            "name": f"{index}-{os.path.basename(overlay['src'])}",
        }
        for index, overlay in enumerate(overlays)
    ]
    if not overlays or not module.params["image"]:
        module.exit_json(changed=False, overlays=described, obsolete=[], checked=0)
    rc, out, err = module.run_command(["docker", "create", "--network", "none", module.params["image"]])
    if rc != 0:
        module.fail_json(msg=f"cannot read files from image {module.params['image']}: {err.strip()}")
    container = out.strip()
    errors, obsolete = [], []
    try:
        for index, overlay in enumerate(overlays):
            found, notes = check_overlay(
                index,
                overlay["src"],
                overlay["dest"],
                overlay["content"],
                image_file(module, container, overlay["dest"]),
            )
            errors += found
            obsolete += notes
    finally:
        module.run_command(["docker", "rm", "-f", container])
    for note in obsolete:
        module.warn(note)
    if errors:
        module.fail_json(
            msg=f"{len(errors)} overlay problem(s) against {module.params['image']}; nothing was "
            f"started: " + " | ".join(errors),
            errors=errors,
            obsolete=obsolete,
            checked=len(overlays),
        )
    module.exit_json(changed=False, overlays=described, obsolete=obsolete, checked=len(overlays))


if __name__ == "__main__":
    main()
