#!/usr/bin/python
"""Ansible module: the diagnostics bundle on the controller (playbooks/bundle.yml): every node's evidence and the
controller's records of the deployment in one tarball, refused if a secret is left in it."""

DOCUMENTATION = r"""
---
module: spark_bundle
short_description: Assemble a diagnostics bundle from every node's evidence and the controller's records
description:
  - Runs on the controller. Puts every node's tarball (library/vllm_evidence.py) under C(nodes/), the controller
    paths in I(include) (the rendered rank specs, the deployment records) under C(controller/) and the staged
    start's failure folders under C(controller/failed-starts/) into one gzipped tarball, with C(MANIFEST.txt)
    listing every member and what could not be read.
  - Every member is scrubbed with the project's one redaction (module_utils/redaction.py) and the literal contents
    of I(secret_files) (the API key, the Hugging Face token); a bundle in which a member still holds one of those
    is refused and not written.
options:
  dest:
    description: Path of the bundle to write (its folder is created).
    type: path
    required: true
  parts:
    description: The nodes' evidence tarballs, fetched to the controller.
    type: list
    elements: path
    default: []
  include:
    description: Controller files or folders to include; a folder's files are taken whole, a missing path is listed.
    type: list
    elements: path
    default: []
  failed_starts:
    description: The staged start's failure folders (each rank's log and stacks at the failure), put under
      C(controller/failed-starts/).
    type: list
    elements: path
    default: []
  secret_files:
    description: Controller files whose whole content is a secret (the API key file, the HF token file).
    type: list
    elements: path
    default: []
  missing:
    description: What each node could not read (node name -> list of reasons), for the manifest.
    type: dict
    default: {}
attributes:
  check_mode:
    support: none
    description: The bundle is its result.
author:
  - spark-serve
"""

EXAMPLES = r"""
- name: Assemble the bundle
  spark_bundle:
    dest: .spark-serve/bundles/bundle-20261206T170000.tar.gz
    parts: [/tmp/evidence/spark-a.tar.gz, /tmp/evidence/spark-b.tar.gz]
    include: [.spark-serve/pair, .spark-serve/records]
    failed_starts: [.spark-serve/logs/20261206T165900]
    secret_files: [.spark-serve/api-key]
  delegate_to: localhost
"""

RETURN = r"""
bundle:
  description: The bundle written.
  returned: success
  type: str
members:
  description: How many members the bundle holds (the manifest included).
  returned: success
  type: int
bytes:
  description: Size of the bundle.
  returned: success
  type: int
scrubbed:
  description: Members in which something secret-looking was hidden on the controller.
  returned: success
  type: list
  elements: str
"""

import os
import tarfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.evidence import leaks, scrub, write_tarball


def node_members(parts):
    members = {}
    for part in parts:
        with tarfile.open(part, "r:gz") as tar:
            for info in tar.getmembers():
                if info.isfile():
                    members[f"nodes/{info.name}"] = tar.extractfile(info).read()
    return members


def controller_members(paths, notes, under="controller"):
    members = {}
    for path in paths:
        if os.path.isfile(path):
            files = [(path, os.path.basename(path))]
        elif os.path.isdir(path):
            base = os.path.basename(os.path.normpath(path))
            files = [
                (os.path.join(root, name), os.path.join(base, os.path.relpath(os.path.join(root, name), path)))
                for root, _, names in os.walk(path)
                for name in sorted(names)
            ]
        else:
            notes.append(f"controller {path}: not found")
            continue
        for source, name in files:
            with open(source, "rb") as data:
                members[f"{under}/{name}"] = data.read()
    return members


def file_secrets(paths):
    secrets = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as source:
                secret = source.read().strip()
        except OSError:
            continue  # no key or token configured
        if secret:
            secrets.append(secret)
    return secrets


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dest=dict(type="path", required=True),
            parts=dict(type="list", elements="path", default=[]),
            include=dict(type="list", elements="path", default=[]),
            failed_starts=dict(type="list", elements="path", default=[]),
            secret_files=dict(type="list", elements="path", default=[]),
            missing=dict(type="dict", default={}),
        ),
        supports_check_mode=False,
    )
    params = module.params
    secrets = file_secrets(params["secret_files"])
    notes = [f"{node}: {reason}" for node, reasons in sorted(params["missing"].items()) for reason in reasons]
    members, scrubbed = {}, []
    found = {
        **node_members(params["parts"]),
        **controller_members(params["include"], notes),
        **controller_members(params["failed_starts"], notes, under="controller/failed-starts"),
    }
    for name, data in found.items():
        clean, changed = scrub(data.decode("utf-8", "replace"), secrets)
        members[name] = clean.encode()
        if changed:
            scrubbed.append(name)
    manifest = "\n".join(["spark-serve diagnostics bundle", *sorted(members), "", "not collected:", *notes]) + "\n"
    members["MANIFEST.txt"] = manifest.encode()
    left = leaks(members, secrets)
    if left:
        module.fail_json(msg=f"refusing the bundle: {', '.join(left)} still hold a secret after scrubbing")
    os.makedirs(os.path.dirname(os.path.abspath(params["dest"])), exist_ok=True)
    write_tarball(params["dest"], members, top=os.path.basename(params["dest"]).split(".")[0])
    module.exit_json(
        changed=True,
        bundle=params["dest"],
        members=len(members),
        bytes=os.path.getsize(params["dest"]),
        scrubbed=scrubbed,
    )


if __name__ == "__main__":
    main()
