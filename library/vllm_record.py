#!/usr/bin/python
"""Ansible module: write a deployment record (JSON + Markdown) on the controller, secrets redacted."""

DOCUMENTATION = r"""
---
module: vllm_record
short_description: Write a vLLM deployment record, passed or failed
description:
  - Writes C(<dir>/<id>.json) and C(<dir>/<id>.md) for one deployment (or rollback), with the overlay texts
    kept in C(<dir>/overlays/<sha256>) so a rollback can mount exactly what ran. Never deletes a record.
  - Every file is written whole or not at all (a temporary file, fsync, then linked to its name) and never
    overwritten; the id holds the time to the microsecond, and an id that exists already is not reused.
  - Redacts secret-named values (C(VLLM_API_KEY), C(HF_TOKEN), ...) and every occurrence of the API key read
    from I(api_key_file) anywhere in the record, then refuses to write if the key would still appear.
  - Signs the record with I(key_file), the controller's record key (created on first use, 32 random bytes, mode
    0600), an HMAC-SHA256 over the record's canonical JSON kept in its C(signature). The head's copy carries it, so
    a controller that lost its records takes a head's copy back only when that key signed it
    (vllm_record_import). The key is never printed.
  - Runs on the controller (delegate_to localhost). In check mode nothing is written.
options:
  dir:
    description: Records directory on the controller.
    type: path
    required: true
  record:
    description:
      - The record's content. Required keys C(kind) (deploy or rollback), C(status) (passed or failed),
        C(inventory), C(profile_name), C(engine_version), C(image) (with C(ref)), C(model) (with C(id),
        C(revision)). Usual keys C(profile), C(ranks), C(overlays), C(timings), C(stacks), C(acceptance), C(reason),
        C(effective_block), C(versions), C(restores).
    type: dict
    required: true
  overlays:
    description:
      - The overlays that ran (C(src), C(dest), C(content)), as vllm_service read them. The record keeps C(src),
        C(dest) and the text's C(sha256); the text goes to the records' overlay store.
    type: list
    elements: dict
    default: []
  api_key_file:
    description: File holding the API key, so that its value can be scrubbed from the record.
    type: path
    default: ""
  key_file:
    description:
      - The controller's record key (64 hex characters, readable by its owner only), created when missing. Empty,
        the record is not signed (a head's copy of it is then never taken back).
    type: path
    default: ""
author:
  - spark-serve
"""

EXAMPLES = r"""
- name: Record this deployment
  vllm_record:
    dir: "{{ spark_serve_controller_dir }}/records"
    key_file: "{{ spark_serve_controller_dir }}/record-key"
    record:
      kind: deploy
      status: passed
      inventory: spark-pair
      profile_name: pair
      engine_version: 0.30.1rc1.dev648
      image: {ref: "registry.local:5000/spark-serve/vllm-gb10@sha256:0123..."}
      model: {id: nvidia/Qwen3.8-Flash-Next-NVFP4, revision: fc694b54}
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
id:
  description: The record's id (UTC time to the microsecond, inventory, kind); sorts by time.
  returned: always
  type: str
path:
  description: Path of the JSON record.
  returned: success
  type: str
markdown:
  description: Path of the Markdown record.
  returned: success
  type: str
overlays:
  description: C(src), C(dest) and C(sha256) of each overlay; its text is C(<dir>/overlays/<sha256>).
  returned: success
  type: list
  elements: dict
"""

import contextlib
import datetime
import hashlib
import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.deploy_record import RecordKeyError, ensure_key, markdown, record_id, sign, write_once
from ansible.module_utils.redaction import redact

REQUIRED = ("kind", "status", "inventory", "profile_name", "engine_version", "image", "model")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dir=dict(type="path", required=True),
            record=dict(type="dict", required=True),
            overlays=dict(type="list", elements="dict", default=[]),
            api_key_file=dict(type="path", default="", no_log=False),
            key_file=dict(type="path", default="", no_log=False),
        ),
        supports_check_mode=True,
    )
    params = module.params
    missing = [key for key in REQUIRED if key not in params["record"]]
    if missing:
        module.fail_json(
            msg=f"record lacks {', '.join(missing)}; rule: every record names kind, status, inventory, "
            "profile, engine version, image and model"
        )
    secret = ""
    if params["api_key_file"]:
        try:
            with open(params["api_key_file"], encoding="utf-8") as key_file:
                secret = key_file.read().strip()
        except OSError as err:  # without the key nothing can be scrubbed: write nothing
            module.fail_json(msg=f"api_key_file {params['api_key_file']}: {err.strerror}; nothing was written")
    if secret:
        module.no_log_values.add(secret)  # the record given may hold it, and Ansible echoes the arguments back
    overlays = [
        dict(overlay, sha256=hashlib.sha256(overlay["content"].encode()).hexdigest()) for overlay in params["overlays"]
    ]
    content = dict(params["record"], overlays=[{key: o[key] for key in ("src", "dest", "sha256")} for o in overlays])
    if secret and secret in json.dumps(redact(content, [secret])):  # redact() leaves mapping keys alone
        module.fail_json(msg="the API key would appear in the record; nothing was written")
    if module.check_mode:
        module.exit_json(changed=True, id=stamped(content)["id"])
    key = record_key(module, params["key_file"])
    try:
        os.makedirs(params["dir"], exist_ok=True)
        store_overlays(os.path.join(params["dir"], "overlays"), overlays)
        record = write_record(module, params["dir"], content, secret, key)
    except OSError as err:  # a full disk: what was written is whole, what was not is absent
        module.fail_json(msg=f"records directory {params['dir']}: {err}; no partial record was left")
    path = os.path.join(params["dir"], f"{record['id']}.json")
    module.exit_json(changed=True, id=record["id"], path=path, markdown=path[:-5] + ".md", overlays=record["overlays"])


def record_key(module, path):
    """The controller's record key (created on first use), or None without a key file; never shown."""
    if not path:
        return None
    try:
        key = ensure_key(path)
    except (RecordKeyError, OSError) as err:
        module.fail_json(msg=f"{err}; nothing was written")
    module.no_log_values.add(key.hex())
    return key


def stamped(content):
    """The record with its creation time (microseconds) and the id made of it."""
    created = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    return dict(content, created_utc=created, id=record_id(created, content["inventory"], content["kind"]))


def store_overlays(store, overlays):
    """Each overlay text once under its sha256 (what a rollback mounts)."""
    for overlay in overlays:
        os.makedirs(store, exist_ok=True)
        stored = os.path.join(store, overlay["sha256"])
        if not os.path.exists(stored):
            with contextlib.suppress(FileExistsError):  # another run stored the same text meanwhile
                write_once(stored, overlay["content"])


def write_record(module, folder, content, secret, key):
    """Write the JSON record under a fresh id (another id if that one exists), signed with `key` when there is one,
    then its Markdown view."""
    for _ in range(5):
        # Signed as it reads back from its file, so a reader's canonical form is the one signed.
        record = json.loads(json.dumps(redact(stamped(content), [secret])))
        record = sign(record, key) if key else record
        text = json.dumps(record, indent=2, sort_keys=True) + "\n"
        try:
            write_once(os.path.join(folder, f"{record['id']}.json"), text)
        except FileExistsError:
            continue
        write_once(os.path.join(folder, f"{record['id']}.md"), markdown(record))
        return record
    module.fail_json(msg=f"five record ids in a row existed already in {folder}; nothing was written")


if __name__ == "__main__":
    main()
