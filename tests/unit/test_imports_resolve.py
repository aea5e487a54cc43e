"""A static checker follows the project's imports: pyproject.toml's [tool.pyright] gives it typings/ as its stub
path, where ansible/module_utils links to module_utils/, so `ansible.module_utils.<ours>` (which Ansible resolves
only at run time) reaches our files and every other ansible.* import the installed Ansible. basedpyright
(requirements.txt, its Node.js from PyPI) checks every import of the files pyproject.toml includes: the modules,
action plugins, module_utils, the roles' modules and vars_plugins."""

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

BASEDPYRIGHT = Path(sys.executable).parent / "basedpyright"


def import_problems(*files):
    """Unresolved imports and unknown imported names that basedpyright reports, in the project or in `files`."""
    run = subprocess.run(
        [str(BASEDPYRIGHT), "--outputjson", *map(str, files)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    report = json.loads(run.stdout)
    return [
        f"{os.path.relpath(found['file'], ROOT)}:{found['range']['start']['line'] + 1}: {found['message']}"
        for found in report["generalDiagnostics"]
        # An unknown imported name has no rule of its own: it shares reportAttributeAccessIssue.
        if found.get("rule") == "reportMissingImports" or found["message"].endswith("is unknown import symbol")
    ]


def test_every_import_of_the_project_resolves():
    assert import_problems() == []


def test_the_check_reports_a_missing_module_and_a_name_our_file_does_not_have(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from ansible.module_utils.basic import AnsibleModule\n"
        "from ansible.module_utils.engine_rules import plan, violation\n"
        "from ansible.module_utils.no_such_file import anything\n"
    )
    problems = import_problems(sample)
    assert [problem.split(": ", 1)[1] for problem in problems] == [
        '"violation" is unknown import symbol',
        'Import "ansible.module_utils.no_such_file" could not be resolved',
    ], problems
