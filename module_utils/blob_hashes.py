"""Whether a Hugging Face cache blob holds what the hub said it holds.

huggingface_hub names each blob after the hub's ETag of the file: the LFS object's sha256 for large files (64 hex),
the git blob sha1 otherwise (40 hex). Hashing the blob's bytes and comparing with its name checks the weights against
the hub's own hash, with no network and no second source. Pure Python (stdlib only).
"""

import hashlib
import os
import re

from ansible.module_utils.hash_patterns import SHA256_HEX

CHUNK = 8 * 1024 * 1024


def blob_hash(path, name):
    """The hash of the blob at `path` in the form its `name` uses: sha256 of the bytes for a 64-hex name, the git
    blob sha1 (`blob <size>\\0` + bytes) for a 40-hex name; None for a name that is no hash."""
    if re.fullmatch(SHA256_HEX, name):
        digest = hashlib.sha256()
    elif re.fullmatch(r"[0-9a-f]{40}", name):
        digest = hashlib.sha1(usedforsecurity=False)
        digest.update(b"blob %d\0" % os.path.getsize(path))
    else:
        return None
    with open(path, "rb") as blob:
        for chunk in iter(lambda: blob.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def blob_problem(rel, path, name):
    """One line when the blob behind snapshot file `rel` does not hash to its name, else None."""
    found = blob_hash(path, name)
    if found is None:
        return f"{rel}: its blob {name} is not named by a hub hash (sha256 or git sha1), so it cannot be checked"
    if found != name:
        return f"{rel}: content hashes to {found}, the hub's hash is {name} (corrupt or altered)"
    return None
