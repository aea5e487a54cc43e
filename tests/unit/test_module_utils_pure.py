"""module_utils/ holds pure logic: no import of Ansible itself, only the project's own module_utils (which Ansible
serves as ansible.module_utils.<name>), so plain pytest tests it and a node script can run it as it is."""

import ast

import pytest

from tests.conftest import ROOT

MODULE_UTILS = sorted((ROOT / "module_utils").glob("*.py"))
OWN = {path.stem for path in MODULE_UTILS}


def ansible_imports(path):
    """Every imported name under `ansible` in the file, as a dotted path (from-imports with each imported name)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] == "ansible"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "ansible":
            found += [f"{node.module}.{alias.name}" for alias in node.names]
    return found


def foreign(name):
    """True unless `name` is ansible.module_utils.<one of ours> (or a name inside one of ours)."""
    parts = name.split(".")
    return not (parts[:2] == ["ansible", "module_utils"] and len(parts) > 2 and parts[2] in OWN)


@pytest.mark.parametrize("path", MODULE_UTILS, ids=lambda path: path.name)
def test_module_utils_import_nothing_of_ansible_but_each_other(path):
    assert [name for name in ansible_imports(path) if foreign(name)] == []


def test_the_check_catches_an_import_of_ansible_itself(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from ansible.module_utils.basic import AnsibleModule\nimport ansible.errors\n"
        "from ansible.module_utils.deploy_record import write_once\n"
    )
    assert [name for name in ansible_imports(sample) if foreign(name)] == [
        "ansible.module_utils.basic.AnsibleModule",
        "ansible.errors",
    ]
