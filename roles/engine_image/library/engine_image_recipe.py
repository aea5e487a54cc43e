#!/usr/bin/python
"""Ansible module: the image folder on the controller still gives the recipe a profile or a record names."""

DOCUMENTATION = r"""
---
module: engine_image_recipe
short_description: Check that images/<name>/ still gives the recipe about to be built (controller only)
description:
  - Reads the image folder again (module_utils/image_recipe.py) on the recorded base and compares every input with
    the recipe it must build (the profile's image, or a deployment record's when a rollback brings back an image a
    node lost); a changed Dockerfile, applier or patch would build another image under the recorded name.
  - Fails naming every input that differs and what to do; changes nothing; supports check mode.
options:
  images_dir:
    description: The image folders on the controller.
    type: path
    required: true
  recipe:
    description: The recipe to build (build, base, inputs_sha256, dockerfile_sha256, applier_sha256, patches).
    type: dict
    required: true
extends_documentation_fragment:
  - read_only
author:
  - spark-serve
"""

EXAMPLES = r"""
- name: Check the folder still gives the recorded recipe
  engine_image_recipe:
    images_dir: "{{ playbook_dir }}/../images"
    recipe: "{{ record.profile.image }}"
  delegate_to: localhost
"""

RETURN = r"""
differences:
  description: One line per input that differs between the folder and the recipe (empty when they agree).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.image_recipe import differences, recipe


def main():
    module = AnsibleModule(
        argument_spec=dict(images_dir=dict(type="path", required=True), recipe=dict(type="dict", required=True)),
        supports_check_mode=True,
    )
    wanted = module.params["recipe"]
    found = recipe(module.params["images_dir"], wanted.get("build", ""), wanted.get("base", ""))
    lines = found["problems"] or differences(wanted, found)
    if lines:
        module.fail_json(
            msg=f"images/{wanted.get('build')} no longer gives {wanted.get('ref')}, so it cannot be built again; "
            "nothing was changed: " + "; ".join(lines) + " (restore those files from the record's spark-serve "
            "version, or deploy the current profile instead)",
            differences=lines,
        )
    module.exit_json(changed=False, differences=[])


if __name__ == "__main__":
    main()
