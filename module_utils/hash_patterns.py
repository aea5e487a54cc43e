"""The shapes of the content hashes several checks share, each written once here: fragments, so each check composes
them into its own pattern (a pinned image reference, a record field, a blob or manifest name).

Copies that cannot import Python (schemas/profile.schema.json, the roles' Jinja) are held equal to these by
tests/unit/test_shared_patterns.py. Pure Python (stdlib only).
"""

SHA256_HEX = "[0-9a-f]{64}"  # a sha256 in lowercase hex: a blob, an overlay text, a patch
DIGEST = f"sha256:{SHA256_HEX}"  # an OCI content digest: what pins an engine image
