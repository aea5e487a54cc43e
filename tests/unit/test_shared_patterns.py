"""A pattern several checks share is written once in Python (module_utils/hash_patterns.py, input_rules.MODEL_ID,
model_checks.COMMIT); the copies that cannot import it (the profile schema, the roles' Jinja, and deploy_record's until
it imports them) are held equal to it here."""

import json
import re

import pytest
from ansible.module_utils import deploy_record, model_checks
from ansible.module_utils.hash_patterns import DIGEST, SHA256_HEX
from ansible.module_utils.image_recipe import PINNED_BASE
from ansible.module_utils.input_rules import MODEL_ID

from tests.conftest import ROOT

SCHEMA = json.loads((ROOT / "schemas" / "profile.schema.json").read_text())
WHOLE = {f"^{SHA256_HEX}$", f"^{DIGEST}$"}


def schema_pattern(*path):
    node = SCHEMA["properties"]
    for key in path:
        node = node[key]
    return node["pattern"]


@pytest.mark.parametrize(
    ("path", "pattern"),
    [
        (("image", "else", "properties", "digest"), f"^{DIGEST}$"),
        (("model", "properties", "id"), MODEL_ID.pattern),
        (("model", "properties", "revision"), model_checks.COMMIT.pattern),
    ],
)
def test_the_schemas_copy_is_the_pythons(path, pattern):
    assert schema_pattern(*path) == pattern


@pytest.mark.parametrize(
    ("compiled", "pattern"),
    [(deploy_record.SHA256_HEX, f"^{SHA256_HEX}$"), (deploy_record.SHA256_DIGEST, f"^{DIGEST}$")],
)
def test_the_records_hash_fields_are_judged_by_the_shared_shapes(compiled, pattern):
    assert compiled.pattern == pattern


def jinja_hash_patterns():
    """Each quoted regex in the roles' and playbooks' YAML that holds a 64-hex sha256, with where it is."""
    files = [*ROOT.glob("roles/**/*.yml"), *ROOT.glob("playbooks/*.yml"), ROOT / "site.yml"]
    return [
        (str(path.relative_to(ROOT)), found)
        for path in sorted(files)
        for found in re.findall(r"'([^'\n]*\[0-9a-f\]\{64\}[^'\n]*)'", path.read_text())
    ]


def test_the_roles_jinja_copies_are_the_pythons():
    """Jinja cannot import Python: a digest or a sha256 name it matches is written as hash_patterns writes it."""
    found = jinja_hash_patterns()
    assert found, "the scan no longer finds the roles' copies: drop this test once none is left"
    assert [(where, pattern) for where, pattern in found if pattern not in WHOLE] == []


@pytest.mark.parametrize(
    ("text", "pinned"),
    [
        ("registry.local:5000/vllm@sha256:" + "a" * 64, True),
        ("registry.local:5000/vllm@sha256:" + "A" * 64, False),  # a digest is lowercase hex
        ("registry.local:5000/vllm@sha256:" + "a" * 63, False),
        ("registry.local:5000/vllm:latest", False),
    ],
)
def test_an_image_is_pinned_by_the_one_digest_shape_wherever_it_is_judged(text, pinned):
    assert bool(PINNED_BASE.match(text)) == bool(model_checks.IMAGE.match(text)) == pinned
