#!/usr/bin/python
"""Ansible module: take back the head's record copies the controller lost, only those its own key signed."""

DOCUMENTATION = r"""
---
module: vllm_record_import
short_description: Recover deployment records from a head's copies, only those the controller's key signed
description:
  - The controller's records are its own truth; the head keeps copies so that a controller that lost them (a fresh
    clone that kept C(.spark-serve)) recovers them. A copy is untrusted input, as anyone who can write the head's
    records folder could plant a C(passed) record (the gate's baseline, the rollback's target) or an overlay text.
  - Reads the copies fetched from the head into I(staging) (C(<id>.json) and C(overlays/<sha256>), as the head keeps
    them) and adds to I(dir) only what I(dir) lacks and verifies. A record verifies when its file is named by its
    own id, every hash field is a hash (C(sha256), C(*_sha256) and C(config_hash) 64 lowercase hex, C(digest) and
    the image's C(id) C(sha256:<64 hex>)), and its C(signature) is the HMAC-SHA256 of its content under the key in
    I(key_file). An overlay text is added only when a record of I(dir) names it and it re-hashes to its name.
  - A copy that does not verify (unsigned, signed with another key, changed, misnamed, a hash that is no hash, no
    key to check it with) is named in C(refused) and a warning with why, and never used.
  - A record or text I(dir) already has is never overwritten. Runs on the controller; in check mode nothing is
    written (C(imported) says what would be).
options:
  staging:
    description: Folder holding the head's copies as fetched (C(<id>.json), C(overlays/<sha256>)).
    type: path
    required: true
  dir:
    description: The controller's records directory.
    type: path
    required: true
  key_file:
    description: The controller's record key (vllm_record's I(key_file)); read only, never created here.
    type: path
    required: true
  source:
    description: How the warnings name where a copy came from (e.g. C(node-0:/var/lib/spark-serve/records)); empty,
      by its path in I(staging).
    type: str
    default: ""
author:
  - spark-serve
"""

EXAMPLES = r"""
- name: Take back the head's copies this controller lacks, only those its key signed
  vllm_record_import:
    staging: "{{ staging.path }}"
    dir: "{{ spark_serve_controller_dir }}/records"
    key_file: "{{ spark_serve_controller_dir }}/record-key"
    source: "{{ inventory_hostname }}:/var/lib/spark-serve/records"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
imported:
  description: The files added to I(dir) (C(<id>.json), C(overlays/<sha256>)), relative to it.
  returned: always
  type: list
  elements: str
refused:
  description: C(path) (as I(source) names it) and C(error) of every head copy that did not verify; none was used.
  returned: always
  type: list
  elements: dict
"""

import contextlib
import glob
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.deploy_record import (
    RECORD_NAME,
    RecordKeyError,
    head_copy_problem,
    overlay_text_problem,
    read_key,
    read_records,
    write_once,
)

# A record is a few kilobytes and an overlay text one source file: anything far larger is not read.
MAX_BYTES = 16 * 1024 * 1024


def staged_bytes(path):
    """The bytes of a staged copy, or None when it is too large to be one."""
    if os.path.getsize(path) > MAX_BYTES:
        return None
    with open(path, "rb") as source:
        return source.read()


def verified_records(staging, folder, key, key_problem):
    """([(name, text, record)] of the head's records that folder lacks and that verify, [(name, why)] of those that
    do not)."""
    good, bad = [], []
    for path in sorted(glob.glob(os.path.join(staging, "*.json"))):
        name = os.path.basename(path)
        if not RECORD_NAME.match(name) or os.path.exists(os.path.join(folder, name)):
            continue  # not a record copy, or one the controller has: its own is kept
        data = staged_bytes(path)
        if data is None:
            bad.append((name, f"larger than {MAX_BYTES} bytes; not a record"))
            continue
        if key is None:
            bad.append((name, f"no record key to verify it with ({key_problem})"))
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            bad.append((name, "not UTF-8 text"))
            continue
        record, problem = head_copy_problem(name, text, key)
        (bad.append((name, problem)) if problem else good.append((name, text, record)))
    return good, bad


def needed_texts(folder, extra_records):
    """The overlay hashes the controller's records (and the ones about to join them) name."""
    records, _ = read_records(sorted(glob.glob(os.path.join(folder, "*.json"))))
    return {o["sha256"] for r in records + extra_records for o in r.get("overlays") or []}


def verified_texts(staging, folder, needed):
    """([(name, bytes)] of the overlay texts a record needs, folder lacks and that re-hash to their name, [(name,
    why)] of needed ones that do not). A text no record names is left where it is, unused."""
    good, bad = [], []
    for path in sorted(glob.glob(os.path.join(staging, "overlays", "*"))):
        name = os.path.basename(path)
        if name not in needed or os.path.exists(os.path.join(folder, "overlays", name)):
            continue
        data = staged_bytes(path)
        problem = f"larger than {MAX_BYTES} bytes" if data is None else overlay_text_problem(name, data)
        if problem is None:
            try:
                good.append((name, data.decode("utf-8")))
                continue
            except UnicodeDecodeError:
                problem = "not UTF-8 text (vllm_record stores source text)"
        bad.append((f"overlays/{name}", problem))
    return good, bad


def main():
    module = AnsibleModule(
        argument_spec=dict(
            staging=dict(type="path", required=True),
            dir=dict(type="path", required=True),
            key_file=dict(type="path", required=True, no_log=False),
            source=dict(type="str", default=""),
        ),
        supports_check_mode=True,
    )
    params = module.params
    key, key_problem = None, ""
    try:
        key = read_key(params["key_file"])
        module.no_log_values.add(key.hex())
    except RecordKeyError as err:
        key_problem = str(err)
    folder, staging = params["dir"], params["staging"]
    try:
        records, bad_records = verified_records(staging, folder, key, key_problem)
        texts, bad_texts = verified_texts(staging, folder, needed_texts(folder, [r for _, _, r in records]))
        imported = [] if module.check_mode else store(folder, records, texts)
    except OSError as err:  # what was written is whole (write_once); what was not is absent
        module.fail_json(msg=f"records directory {folder} or staging {staging}: {err}; no partial record was left")
    if module.check_mode:
        imported = [name for name, _, _ in records] + [f"overlays/{name}" for name, _ in texts]
    where = params["source"] or staging
    refused = [{"path": f"{where}/{name}", "error": why} for name, why in bad_records + bad_texts]
    for bad in refused:
        module.warn(f"head copy {bad['path']} is not used: {bad['error']}")
    module.exit_json(changed=bool(imported), imported=imported, refused=refused)


def store(folder, records, texts):
    """Write each verified copy under its name in the controller's records, never over an existing file (one written
    meanwhile by another run is kept)."""
    written = []
    files = [(name, text) for name, text, _ in records] + [(f"overlays/{name}", text) for name, text in texts]
    for name, text in files:
        os.makedirs(os.path.dirname(os.path.join(folder, name)), exist_ok=True)
        with contextlib.suppress(FileExistsError):
            write_once(os.path.join(folder, name), text)
            written.append(name)
    return written


if __name__ == "__main__":
    main()
