"""Shared test setup: the project's module_utils, modules and action plugins importable the way Ansible
imports them, and project paths."""

import sys
from pathlib import Path

import ansible.module_utils
import ansible.modules
import ansible.plugins.action

ROOT = Path(__file__).resolve().parents[1]

# Modules import the project's helpers as ansible.module_utils.<name> (ansible.cfg `module_utils`); tests import
# them under that same name, so a test runs the import a module really does and sees the same module objects.
ansible.module_utils.__path__.append(str(ROOT / "module_utils"))
# Modules and the action plugin as `from ansible.modules import vllm_record`, like an installed plugin.
ansible.modules.__path__ += [str(ROOT / "library")] + [str(path) for path in sorted(ROOT.glob("roles/*/library"))]
ansible.plugins.action.__path__.append(str(ROOT / "action_plugins"))

# Test helpers as `from tests.profiles import profile`, whichever directory pytest starts in.
sys.path.insert(0, str(ROOT))
