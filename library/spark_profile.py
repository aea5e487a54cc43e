#!/usr/bin/python
"""Documentation for the spark_profile action plugin (action_plugins/spark_profile.py does the work)."""

DOCUMENTATION = r"""
---
module: spark_profile
short_description: Resolve and shape-check the inventory's deployment profile (controller only)
description:
  - Looks up O(name) in C(spark_serve_profiles), templates every value, merges C(spark_serve_profile_overrides)
    recursively (mappings merge, lists are replaced), and validates the result against O(schema).
  - Adds C(image.ref), what every node runs. A registry image is C(<name>@<digest>). A built image (C(image.build),
    a folder of O(images_dir)) is checked on the controller (base pinned by digest, every patch of its series listed
    in C(SHA256SUMS) with that hash) and named C(spark-serve/<build>:<hash of its inputs>); its inputs (base,
    Dockerfile, patches with their sha256) stay in C(image) as the image's provenance (docs/images.md).
  - Fails with one line per problem, each naming the field, the file it comes from and the rule.
options:
  name:
    description: The profile name (C(spark_serve_profile)); unset is refused naming the inventory.
    type: str
  schema:
    description: Path of the profile JSON Schema on the controller.
    type: path
    required: true
  profiles_file:
    description: Where C(spark_serve_profiles) is defined, named in messages.
    type: str
    default: group_vars/all/profiles.yml
  images_dir:
    description: The image folders (C(images/<build>/)); default the C(images) folder beside the schema's folder.
    type: path
extends_documentation_fragment:
  - read_only
"""

EXAMPLES = r"""
- name: Resolve the inventory's profile (playbooks/profile.yml)
  spark_profile:
    name: "{{ spark_serve_profile }}"
    schema: "{{ playbook_dir }}/../schemas/profile.schema.json"
"""

RETURN = r"""
profile:
  description: The resolved profile (also set as the fact C(spark_serve_resolved)); the task output is hidden
    because a profile may carry credentials that vllm_args then refuses.
  returned: success
  type: dict
problems:
  description: Every problem, one line each, naming the field, the file it comes from and the rule.
  returned: failed
  type: list
  elements: str
  sample: ["model.revision: 'main' does not match '^[0-9a-f]{7,40}$' [rule: schema pattern]"]
"""
