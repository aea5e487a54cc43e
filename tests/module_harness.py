"""Run a module's main() in-process the way Ansible runs it, as community.docker's module unit tests do.

The arguments reach AnsibleModule through ansible.module_utils.testing.patch_module_args; the result is the one
AnsibleModule would print (no_log values masked, invocation added), caught at its serialization hook. Every result
is held to the module's RETURN documentation, which is what validate-modules cannot check statically: a returned
key must be documented, and a key documented `returned: always` (or `success`, on success) must be returned.
"""

import json
from pathlib import Path
from unittest import mock

import yaml
from ansible.module_utils import _internal, basic
from ansible.module_utils.common import warnings
from ansible.module_utils.testing import patch_module_args

ROOT = Path(__file__).resolve().parents[1]
# Keys Ansible itself defines for every module result; they need no RETURN entry.
COMMON_KEYS = {"changed", "failed", "msg", "invocation", "warnings", "deprecations", "diff", "exception", "skipped"}
# What AnsibleModule.add_path_info adds to a result that returns `path`.
PATH_INFO_KEYS = {"uid", "gid", "owner", "group", "mode", "state", "size"}


class _Returned(Exception):
    def __init__(self, result):
        super().__init__("module returned")
        self.result = result


def _record(_module, result):
    result = dict(result, warnings=list(warnings.get_warning_messages()))
    raise _Returned(result)


def documented_returns(module):
    """{key: RETURN entry} of a module (its file's RETURN block)."""
    return yaml.safe_load(module.RETURN) or {}


def check_returns(name, returns, result, check_mode=False):
    """Every key `result` holds is documented; every key documented as always returned (and, on success outside
    check mode, as returned on success) is there when the module did not fail. Returns the problems, one line each."""
    ansible_keys = COMMON_KEYS | (PATH_INFO_KEYS if "path" in result else set())
    problems = [
        f"{name}: returns undocumented key {key!r}" for key in sorted(set(result) - set(returns) - ansible_keys)
    ]
    if result.get("failed"):
        return problems  # a failure may end before the module has anything else to say
    when = {"always"} if check_mode else {"always", "success"}
    problems += [
        f"{name}: documents {key!r} as returned {entry.get('returned')} but did not return it"
        for key, entry in sorted(returns.items())
        if entry.get("returned") in when and key not in result
    ]
    return problems


def run_module(module, args, check_mode=False, diff=False, main=None):
    """module.main() (or `main`) with `args`; the result dict (with failed=True when the module failed), held to
    RETURN."""
    warnings._global_warnings.clear()  # the module's warnings of this run only
    warnings._global_deprecations.clear()
    module_args = dict(args, _ansible_check_mode=check_mode, _ansible_diff=diff)
    with (
        patch_module_args(module_args),
        mock.patch.object(basic.AnsibleModule, "_record_module_result", _record),
        # Modules run outside the controller: their warnings go into the result, not to the controller's display
        # (the tests import controller code, which flags this process as the controller).
        mock.patch.object(_internal, "is_controller", False),
    ):
        try:
            (main or module.main)()
        except _Returned as returned:
            result = returned.result
        else:
            raise AssertionError(f"{module.__name__}.main() returned without exit_json or fail_json")
    result.setdefault("failed", False)
    name = module.__name__.rsplit(".", 1)[-1]
    problems = check_returns(name, documented_returns(module), result, check_mode)
    assert not problems, problems
    json.dumps(result)  # what a module returns must serialize
    return result
