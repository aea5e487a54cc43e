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
    So is the head's listing of them, as a compromised head reports any path.
  - Runs twice on the controller. With I(reported) (the head's C(find) result) it reduces each reported file to its
    name in I(head_dir), C(<id>.json) or C(overlays/<sha256>) (the names vllm_record writes), and returns in
    C(fetch) those I(dir) lacks. Every other file (a C(..), another folder, a NUL or newline, a link, a name no
    record has) is named in C(refused) and a warning with the head and the path, before anything is read; nothing
    is written. The caller reads the chosen names from the head as data (C(ansible.builtin.slurp)).
  - With I(copies) (those names and their content) it adds to I(dir) only what I(dir) lacks and verifies. A record
    verifies when its file is named by its own id, every hash field is a hash (C(sha256), C(*_sha256) and
    C(config_hash) 64 lowercase hex, C(digest) and the image's C(id) C(sha256:<64 hex>)), and its C(signature) is
    the HMAC-SHA256 of its content under the key in I(key_file). An overlay text is added only when a record of
    I(dir) names it and it re-hashes to its name.
  - A copy that does not verify (unsigned, signed with another key, changed, misnamed, a hash that is no hash, no
    key to check it with) is named in C(refused) and a warning with why, and never used.
  - A record or text I(dir) already has is never overwritten. In check mode nothing is written (C(imported) says
    what would be).
options:
  reported:
    description: The files the head's C(ansible.builtin.find) reported in I(head_dir) (C(path), C(islnk),
      C(isreg) of each); returns the names to read. Exactly one of I(reported) and I(copies).
    type: list
    elements: raw
  copies:
    description: The head's copies that C(fetch) named, name (C(<id>.json), C(overlays/<sha256>)) to content as
      C(ansible.builtin.slurp) returns it (base64); adds those that verify to I(dir).
    type: dict
  head:
    description: The head the copies come from, as the warnings name it.
    type: str
    required: true
  head_dir:
    description: The records folder on the head; every reported file must be directly in it or in its
      C(overlays) folder.
    type: str
    required: true
  dir:
    description: The controller's records directory.
    type: path
    required: true
  key_file:
    description: The controller's record key (vllm_record's I(key_file)); read only, never created here. Required
      with I(copies).
    type: path
author:
  - spark-serve
"""

EXAMPLES = r"""
- name: Choose the head's copies this controller lacks, by name
  vllm_record_import:
    reported: "{{ head_records.files }}"
    head: "{{ inventory_hostname }}"
    head_dir: /var/lib/spark-serve/records
    dir: "{{ spark_serve_controller_dir }}/records"
  delegate_to: localhost
  run_once: true
  register: chosen

- name: Read them from the head as data
  ansible.builtin.slurp:
    src: "/var/lib/spark-serve/records/{{ item }}"
  loop: "{{ chosen.fetch }}"
  run_once: true
  register: read

- name: Take back those this controller's key signed
  vllm_record_import:
    copies: "{{ read.results | items2dict(key_name='item', value_name='content') }}"
    head: "{{ inventory_hostname }}"
    head_dir: /var/lib/spark-serve/records
    dir: "{{ spark_serve_controller_dir }}/records"
    key_file: "{{ spark_serve_controller_dir }}/record-key"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
fetch:
  description: With I(reported), the names (C(<id>.json), C(overlays/<sha256>)) in I(head_dir) to read, those
    I(dir) lacks.
  returned: when reported is given
  type: list
  elements: str
imported:
  description: With I(copies), the files added to I(dir) (C(<id>.json), C(overlays/<sha256>)), relative to it.
  returned: when copies is given
  type: list
  elements: str
refused:
  description: C(path) (C(<head>:<path>)) and C(error) of every reported file or copy not used; none was read
    (with I(reported)) or written (with I(copies)).
  returned: always
  type: list
  elements: dict
"""

import base64
import binascii
import contextlib
import glob
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.deploy_record import (
    OVERLAY_FILE,
    RECORD_FILE,
    RecordKeyError,
    copy_name_problem,
    head_copy_name,
    head_copy_problem,
    overlay_text_problem,
    read_key,
    read_records,
    write_once,
)

# A record is a few kilobytes and an overlay text one source file: anything far larger is not used.
MAX_BYTES = 16 * 1024 * 1024


def chosen(reported, head_dir, folder):
    """(names in head_dir that folder lacks, [(reported path, why)] of the files that are no record or text there)."""
    wanted, bad = set(), []
    for entry in reported:
        name, problem = head_copy_name(entry, head_dir)
        if problem:
            bad.append((entry.get("path") if isinstance(entry, dict) else entry, problem))
        elif not os.path.exists(os.path.join(folder, name)):
            wanted.add(name)  # one the controller has is never read: its own is kept
    return sorted(wanted), bad


def decoded(copies):
    """({name: bytes} of the copies under a record's or a text's name whose content decodes and is small enough,
    [(name, why)] of the others). The names were chosen by chosen(); they are checked again because this module
    writes under them."""
    good, bad = {}, []
    for name, content in sorted(copies.items()):
        problem = copy_name_problem(name)
        try:
            data = b"" if problem else base64.b64decode(str(content), validate=True)
        except (binascii.Error, ValueError):
            problem = "its content is not base64 (as slurp returns it)"
        if problem is None and len(data) > MAX_BYTES:
            problem = f"larger than {MAX_BYTES} bytes; not a record or an overlay text"
        (bad.append((name, problem)) if problem else good.update({name: data}))
    return good, bad


def verified_records(copies, folder, key, key_problem):
    """([(name, text, record)] of the head's records that folder lacks and that verify, [(name, why)] of those that
    do not)."""
    good, bad = [], []
    for name, data in copies.items():
        if not RECORD_FILE.fullmatch(name) or os.path.exists(os.path.join(folder, name)):
            continue  # an overlay text, or a record the controller has meanwhile: its own is kept
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


def verified_texts(copies, folder, needed):
    """([(name, text)] of the overlay texts a record needs, folder lacks and that re-hash to their name, [(name,
    why)] of needed ones that do not), each named overlays/<sha256>. A text no record names is left unused."""
    good, bad = [], []
    for name, data in copies.items():
        sha256 = name.rpartition("/")[2]
        if not OVERLAY_FILE.fullmatch(name) or sha256 not in needed or os.path.exists(os.path.join(folder, name)):
            continue
        problem = overlay_text_problem(sha256, data)
        if problem is None:
            try:
                good.append((name, data.decode("utf-8")))
                continue
            except UnicodeDecodeError:
                problem = "not UTF-8 text (vllm_record stores source text)"
        bad.append((name, problem))
    return good, bad


def record_key(module):
    """(key, None) of the controller's record key, or (None, why not): without it every copy is named, none used."""
    try:
        key = read_key(module.params["key_file"])
    except RecordKeyError as err:
        return None, str(err)
    module.no_log_values.add(key.hex())
    return key, None


def choose(module):
    """Answer which reported files to read; name every other one, before anything is read."""
    params = module.params
    wanted, bad = chosen(params["reported"], params["head_dir"], params["dir"])
    refused = [{"path": f"{params['head']}:{path}", "error": why} for path, why in bad]
    for _, why in bad:
        module.warn(f"head {params['head']} reported a file that is not read: {why}")
    module.exit_json(changed=False, fetch=wanted, refused=refused)


def take_back(module):
    """Add the copies that verify to the controller's records; name every other one."""
    params = module.params
    key, key_problem = record_key(module)
    folder = params["dir"]
    copies, bad_copies = decoded(params["copies"])
    try:
        records, bad_records = verified_records(copies, folder, key, key_problem)
        texts, bad_texts = verified_texts(copies, folder, needed_texts(folder, [r for _, _, r in records]))
        imported = [] if module.check_mode else store(folder, records, texts)
    except OSError as err:  # what was written is whole (write_once); what was not is absent
        module.fail_json(msg=f"records directory {folder}: {err}; no partial record was left")
    if module.check_mode:
        imported = [name for name, _, _ in records] + [name for name, _ in texts]
    where = f"{params['head']}:{params['head_dir'].rstrip('/')}"
    refused = [{"path": f"{where}/{name}", "error": why} for name, why in bad_copies + bad_records + bad_texts]
    for bad in refused:
        module.warn(f"head copy {bad['path']} is not used: {bad['error']}")
    module.exit_json(changed=bool(imported), imported=imported, refused=refused)


def store(folder, records, texts):
    """Write each verified copy under its name in the controller's records, never over an existing file (one written
    meanwhile by another run is kept)."""
    written = []
    for name, text in [(name, text) for name, text, _ in records] + texts:
        os.makedirs(os.path.dirname(os.path.join(folder, name)), exist_ok=True)
        with contextlib.suppress(FileExistsError):
            write_once(os.path.join(folder, name), text)
            written.append(name)
    return written


def main():
    module = AnsibleModule(
        argument_spec=dict(
            reported=dict(type="list", elements="raw"),
            copies=dict(type="dict"),
            head=dict(type="str", required=True),
            head_dir=dict(type="str", required=True),  # a path on the head: never expanded on the controller
            dir=dict(type="path", required=True),
            key_file=dict(type="path", no_log=False),
        ),
        mutually_exclusive=[("reported", "copies")],
        required_one_of=[("reported", "copies")],
        required_by={"copies": "key_file"},
        supports_check_mode=True,
    )
    if module.params["reported"] is not None:
        choose(module)
    take_back(module)


if __name__ == "__main__":
    main()
