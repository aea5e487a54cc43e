#!/usr/bin/python
"""Ansible module: read-only state of one pinned snapshot in a Hugging Face cache (HF_HOME layout)."""

DOCUMENTATION = r"""
---
module: hf_snapshot
short_description: Read-only state of one pinned model snapshot in a Hugging Face cache
description:
  - Resolves the pinned revision to its commit (the revision itself when it is 40 hex digits, else the
    cache's C(refs/<revision>) file that huggingface_hub writes), reads the completion manifest that
    hf_model writes after a verified download, and compares the snapshot's files (symlinks into
    C(blobs/), followed) with the expected list and sizes.
  - The expected list is O(expected) when given (fresh from the hub API), else the manifest's.
  - Never changes anything; works in check mode.
options:
  cache_dir:
    description: HF_HOME directory; the hub cache is C(<cache_dir>/hub).
    type: path
    required: true
  repo:
    description: Model repository id C(org/name).
    type: str
    required: true
  revision:
    description: Pinned revision (commit sha or a prefix of it).
    type: str
    required: true
  manifest_dir:
    description: Directory of the completion manifests (C(<repo folder>@<commit>.json)).
    type: path
    required: true
  commit:
    description: Commit the revision resolves to, when known already (e.g. from the hub API).
    type: str
    default: ""
  expected:
    description: Expected files and sizes (relative path to bytes); empty uses the manifest's.
    type: dict
    default: {}
  verify_hashes:
    description:
      - Hash every file's blob and compare it with the blob's name, the hub's hash of the file (the LFS sha256,
        or the git blob sha1 of a small file); a mismatch is a problem. Reads every byte, so only after a download
        or a copy.
    type: bool
    default: false
author: spark-serve
"""

EXAMPLES = r"""
- name: Probe the snapshot
  hf_snapshot:
    cache_dir: /var/lib/spark-serve/huggingface
    repo: nvidia/Qwen3.8-Flash-Next-NVFP4
    revision: fc694b54
    manifest_dir: /var/lib/spark-serve/huggingface/spark-serve-manifests
"""

RETURN = r"""
commit:
  description: Commit sha the revision resolves to ("" when unknown here).
  returned: always
  type: str
repo_folder:
  description: The repository's folder in the hub cache (C(<cache_dir>/hub/models--org--name)).
  returned: always
  type: str
snapshot_path:
  description: C(<repo_folder>/snapshots/<commit>) ("" when the commit is unknown).
  returned: always
  type: str
manifest_path:
  description: Path of this snapshot's completion manifest ("" when the commit is unknown).
  returned: always
  type: str
manifest:
  description: The completion manifest (repo, revision, commit, files), or {} when absent.
  returned: always
  type: dict
complete:
  description: The manifest exists and every expected file is present with its expected size.
  returned: always
  type: bool
problems:
  description: One line per missing or wrong-sized file (path, expected size, actual size).
  returned: always
  type: list
  elements: str
files:
  description: Present snapshot files, relative path to C({size, blob}) (blob relative to the repo folder).
  returned: always
  type: dict
sizes:
  description: Present snapshot files, relative path to size in bytes.
  returned: always
  type: dict
tree_cache:
  description: The client's tree listing of the commit (C(trees/<commit>.json), relative to the repo folder), or "".
  returned: always
  type: str
hashes:
  description: With I(verify_hashes), relative path to the hub's hash its content matched (C(sha256:<hex>) or
    C(git-sha1:<hex>)); the manifest keeps them.
  returned: always
  type: dict
partial_downloads:
  description: Temporary C(*.incomplete) files under C(blobs/) (left by an interrupted download).
  returned: always
  type: list
  elements: str
"""

import json
import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.blob_hashes import blob_problem


def hash_problems(repo_folder, files, result):
    """Hash each file's blob once against its name; fill result['hashes'] with the matches."""
    problems = []
    for rel, info in sorted(files.items()):
        name = os.path.basename(info["blob"])
        if not info["blob"]:
            problem = f"{rel}: not a link into the cache's blobs/, so it cannot be checked against the hub's hash"
        else:
            problem = blob_problem(rel, os.path.join(repo_folder, info["blob"]), name)
        if problem:
            problems.append(problem)
        else:
            result["hashes"][rel] = ("sha256:" if len(name) == 64 else "git-sha1:") + name
    return problems


def main():
    module = AnsibleModule(
        argument_spec={
            "cache_dir": {"type": "path", "required": True},
            "repo": {"type": "str", "required": True},
            "revision": {"type": "str", "required": True},
            "manifest_dir": {"type": "path", "required": True},
            "commit": {"type": "str", "default": ""},
            "expected": {"type": "dict", "default": {}},
            "verify_hashes": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    folder_name = "models--" + p["repo"].replace("/", "--")
    repo_folder = os.path.join(p["cache_dir"], "hub", folder_name)
    commit = p["commit"]
    if not commit and re.fullmatch(r"[0-9a-f]{40}", p["revision"]):
        commit = p["revision"]
    if not commit:
        try:
            with open(os.path.join(repo_folder, "refs", p["revision"]), encoding="utf-8") as ref:
                commit = ref.read().strip()
        except OSError:
            commit = ""
    result = {
        "changed": False,
        "commit": commit,
        "repo_folder": repo_folder,
        "snapshot_path": "",
        "manifest_path": "",
        "manifest": {},
        "complete": False,
        "problems": [],
        "files": {},
        "sizes": {},
        "tree_cache": "",
        "hashes": {},
        "partial_downloads": [],
    }
    blobs = os.path.join(repo_folder, "blobs")
    if os.path.isdir(blobs):
        result["partial_downloads"] = sorted(n for n in os.listdir(blobs) if n.endswith(".incomplete"))
    if not commit:
        result["problems"] = [f"revision {p['revision']} is not in the cache (no refs/{p['revision']})"]
        module.exit_json(**result)

    snapshot = os.path.join(repo_folder, "snapshots", commit)
    manifest_path = os.path.join(p["manifest_dir"], f"{folder_name}@{commit}.json")
    result.update(snapshot_path=snapshot, manifest_path=manifest_path)
    try:
        with open(manifest_path, encoding="utf-8") as fh:
            result["manifest"] = json.load(fh)
    except (OSError, ValueError):
        result["manifest"] = {}

    files = {}
    for root, _dirs, names in os.walk(snapshot):
        for name in names:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, snapshot).replace(os.sep, "/")
            try:
                size = os.stat(path).st_size  # follows the symlink into blobs/
            except OSError:
                continue  # dangling symlink: the blob is missing
            real = os.path.realpath(path)
            blob = os.path.relpath(real, repo_folder) if real.startswith(repo_folder + os.sep) else ""
            files[rel] = {"size": size, "blob": blob.replace(os.sep, "/")}
    result["files"] = files
    result["sizes"] = {rel: info["size"] for rel, info in files.items()}
    tree = os.path.join("trees", f"{commit}.json")
    result["tree_cache"] = tree if os.path.isfile(os.path.join(repo_folder, tree)) else ""

    expected = p["expected"] or result["manifest"].get("files") or {}
    problems = []
    if not result["manifest"] and not p["expected"]:
        problems.append(f"no completion manifest {manifest_path}")
    for rel in sorted(expected):
        want = int(expected[rel])
        have = files.get(rel)
        if have is None:
            problems.append(f"{rel}: missing (expected {want} bytes)")
        elif have["size"] != want:
            problems.append(f"{rel}: {have['size']} bytes, expected {want}")
    if p["verify_hashes"]:
        problems += hash_problems(repo_folder, files, result)
    result["problems"] = problems
    result["complete"] = bool(result["manifest"]) and not problems and bool(expected)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
