#!/usr/bin/python
"""Ansible module: one rank's complete container spec, mounts, configuration hash and rank file
(module_utils/rank_spec.py)."""

DOCUMENTATION = r"""
---
module: vllm_rank_spec
short_description: Describe one rank's container (spec, bind mounts, configuration hash, rank file)
description:
  - Assembles what a rank's container runs from vllm_args' result and the service's options (image, argv, env,
    container options, whether the head reads the engine's key, caches, overlays, tuned MoE tables), the bind mounts
    compose renders, and the rank file playbooks/validate.yml writes.
  - The configuration hash (the container's C(org.spark-serve.config-hash) label) is the SHA-256 of the spec as
    sorted JSON without the restart policy, with the SHA-256 of the engine's key in place of C(api_key); a new key
    or any other change restarts the ranks, a new restart policy alone does not.
  - Reads the key file on the host it runs on (run it on the controller, C(delegate_to) localhost); neither the key
    nor its digest is ever returned, only the hash.
options:
  host:
    description: The rank's inventory name.
    type: str
    required: true
  rank:
    description: The rank (0 = head).
    type: int
    required: true
  image:
    description: Image reference, pinned by digest.
    type: str
    required: true
  argv:
    description: The rank's full command, vllm_args' C(argv).
    type: list
    elements: str
    required: true
  env:
    description: The rank's environment, vllm_args' C(env); C(VLLM_CACHE_ROOT) is mounted from O(engine_cache_dir).
    type: dict
    required: true
  effective_block:
    description: vllm_args' C(effective_block), for the rank file.
    type: int
  scheduler_block:
    description: vllm_args' C(scheduler_block), for the rank file.
    type: int
  container_defaults:
    description: The role's container options.
    type: dict
    default: {}
  container:
    description: The profile's C(container) section, over O(container_defaults) key by key.
    type: dict
    default: {}
  container_overrides:
    description: The inventory's container options, over O(container) key by key.
    type: dict
    default: {}
  restart:
    description: The Docker restart policy (left out of the hash).
    type: str
    required: true
  engine_key_file:
    description:
      - The key file the engine checks, on the host the module runs on; the head reads it (C(api_key) true) and its
        digest goes into the hash. Empty = no key.
    type: str
    default: ""
  engine_key_made:
    description:
      - Whether I(engine_key_file) must exist. False before the first deploy made it (validation, check mode), when a
        missing file hashes as no key and the deploy that makes it restarts the ranks.
    type: bool
    default: true
  hf_cache_dir:
    description: The node's Hugging Face cache, mounted read-only at C(HF_HOME).
    type: str
    required: true
  engine_cache_dir:
    description: The node's vLLM cache folder for this image, mounted at C(VLLM_CACHE_ROOT).
    type: str
    required: true
  overlays:
    description: vllm_overlays' C(overlays) (C(name), C(dest), C(sha256), C(src)), mounted read-only over the image's.
    type: list
    elements: dict
    default: []
  tuned_files:
    description: The tuned MoE tables, ansible.builtin.find's C(files) (each with C(path) and C(checksum)).
    type: list
    elements: dict
    default: []
  tuned_folder:
    description: The container folder the engine reads tuned tables from (C(VLLM_TUNED_CONFIG_FOLDER)).
    type: str
    default: ""
  service_dir:
    description: The service's folder on the node (overlays/ and tuned_configs/ under it).
    type: str
    required: true
extends_documentation_fragment:
  - read_only
author:
  - spark-serve
"""

EXAMPLES = r"""
- name: Describe the head's container
  vllm_rank_spec:
    host: spark-a
    rank: 0
    image: registry.local:5000/spark-serve/vllm-gb10@sha256:0123...
    argv: "{{ vllm_service_args.argv }}"
    env: "{{ vllm_service_args.env }}"
    container_defaults: {ipc: host, shm_size: 1gb}
    restart: "no"
    engine_key_file: /srv/spark-serve/.spark-serve/engine-key
    hf_cache_dir: /var/lib/spark-serve/huggingface
    engine_cache_dir: /var/lib/spark-serve/vllm-cache/84e8fdf1c40d26f0
    tuned_files: "{{ vllm_service_tuned_found.files }}"
    tuned_folder: /opt/spark-serve/tuned_configs
    service_dir: /etc/spark-serve
  delegate_to: localhost
  register: vllm_service_rank
"""

RETURN = r"""
spec:
  description:
    - What the container runs; C(image), C(argv), C(env), C(container) (with C(restart)), C(api_key) (whether the
      head reads the key, never the key), C(hf_cache_dir), C(engine_cache_dir), C(overlays) and, when there are
      tuned tables, C(tuned_tables) (C(name), C(checksum)).
  returned: always
  type: dict
mounts:
  description: The bind mounts in compose's order, each C(src), C(dest), C(ro).
  returned: always
  type: list
  elements: dict
  sample: [{src: /var/lib/spark-serve/huggingface, dest: /var/lib/spark-serve/huggingface, ro: true}]
config_hash:
  description: The configuration hash, the container's C(org.spark-serve.config-hash) label.
  returned: always
  type: str
  sample: 96a6b96e64fb9a7e4b36b511f53b012421b2abdbd5d1e8562318dfa651e74b41
rank_file:
  description:
    - The rank's complete spec as playbooks/validate.yml writes it (C(rank<N>.spec.json)); the spec without
      C(api_key), with C(host), C(rank), C(mounts), C(env_file), C(effective_block), C(scheduler_block) and
      C(config_hash).
  returned: always
  type: dict
tuned_tables:
  description: The tuned MoE tables to install, each C(name), C(path) (on the controller) and C(checksum) (SHA-1).
  returned: always
  type: list
  elements: dict
"""

import os
from dataclasses import fields

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.rank_spec import RankInputs, key_digest, render

ARGUMENT_SPEC = {
    "host": {"type": "str", "required": True},
    "rank": {"type": "int", "required": True},
    "image": {"type": "str", "required": True},
    "argv": {"type": "list", "elements": "str", "required": True},
    "env": {"type": "dict", "required": True},
    "effective_block": {"type": "int"},
    "scheduler_block": {"type": "int"},
    "container_defaults": {"type": "dict", "default": {}},
    "container": {"type": "dict", "default": {}},
    "container_overrides": {"type": "dict", "default": {}},
    "restart": {"type": "str", "required": True},
    "engine_key_file": {"type": "str", "default": ""},
    "engine_key_made": {"type": "bool", "default": True},
    "hf_cache_dir": {"type": "str", "required": True},
    "engine_cache_dir": {"type": "str", "required": True},
    "overlays": {"type": "list", "elements": "dict", "default": []},
    "tuned_files": {"type": "list", "elements": "dict", "default": []},
    "tuned_folder": {"type": "str", "default": ""},
    "service_dir": {"type": "str", "required": True},
}


def read_key(module, path):
    """The key file's text, strict UTF-8 as Ansible's file lookup reads it; a failure names the file, never a byte
    of it."""
    try:
        with open(path, "rb") as key:
            return key.read().decode("utf-8")
    except OSError as error:
        module.fail_json(msg=f"{path}: the engine's key file cannot be read ({error.strerror})")
    except UnicodeDecodeError:
        module.fail_json(msg=f"{path}: the engine's key file is not UTF-8 text")


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    inputs = RankInputs(**{field.name: module.params[field.name] for field in fields(RankInputs)})
    made = module.params["engine_key_made"] or os.path.exists(inputs.engine_key_file)
    digest = key_digest(read_key(module, inputs.engine_key_file)) if inputs.api_key and made else ""
    module.exit_json(changed=False, **render(inputs, digest))


if __name__ == "__main__":
    main()
