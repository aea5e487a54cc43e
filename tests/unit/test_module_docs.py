"""What ansible-test's validate-modules checks, for this project's layout: every module's documentation, as
ansible-doc renders it (doc fragments merged), against the argument spec the module really builds; and the page a
person reads, ansible-doc's text mode, which formats every field the JSON mode only passes through.

Returned keys are checked against RETURN on every module run in the module tests (tests/module_harness.py);
here every RETURN entry must be well-formed.
"""

import ast
import json
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from unittest import mock

import pytest
import yaml
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible.plugins.action import spark_lock as spark_lock_action
from ansible.plugins.action import spark_profile as spark_profile_action
from ansible.plugins.action import spark_transfer as spark_transfer_action
from ansible.plugins.action import vllm_staged_start as staged_start_action

from tests.runner import BIN, ROOT, command_env

LIBRARIES = ["library"] + sorted(str(path.relative_to(ROOT)) for path in ROOT.glob("roles/*/library"))
MODULES = {path.stem: library for library in LIBRARIES for path in sorted((ROOT / library).glob("*.py"))}
# Modules whose work an action plugin does: the plugin holds the argument spec.
ACTION_SPECS = {
    "spark_lock": spark_lock_action.ARGUMENT_SPEC,
    "spark_profile": spark_profile_action.ARGUMENT_SPEC,
    "spark_transfer": spark_transfer_action.ARGUMENT_SPEC,
    "vllm_staged_start": staged_start_action.ARGUMENT_SPEC,
}
# The first line of each module's page in ansible-doc's text mode: its name, then its file.
PAGE_HEADER = re.compile(r"^> MODULE (\S+) \(", re.MULTILINE)
# What a missing field means, in the documentation and in an argument spec alike.
FIELD_DEFAULTS = {"type": "str", "required": False, "default": None, "choices": None, "elements": None, "aliases": []}


@pytest.fixture(scope="session")
def rendered():
    """(exit code, output, errors) of `ansible-doc -j -M <every library folder> <every module>`: one process, as
    ansible-doc loads doc fragments and renders each module the same way module by module."""
    proc = subprocess.run(
        [str(BIN / "ansible-doc"), "-j", "-M", ":".join(LIBRARIES), *sorted(MODULES)],
        cwd=ROOT,
        env=command_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc.returncode, proc.stdout, proc.stderr


def ansible_doc_text(*names):
    """(exit code, output, errors) of ansible-doc's text mode for `names`, every library folder on -M."""
    proc = subprocess.run(
        [str(BIN / "ansible-doc"), "-t", "module", "-M", ":".join(LIBRARIES), *names],
        cwd=ROOT,
        env=command_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc.returncode, proc.stdout, proc.stderr


def split_pages(out):
    """{module: its page} of ansible-doc's text output, each page from its header line to the next one."""
    headers = list(PAGE_HEADER.finditer(out))
    ends = [header.start() for header in headers[1:]] + [len(out)]
    return {header.group(1): out[header.start() : end] for header, end in zip(headers, ends, strict=True)}


@pytest.fixture(scope="session")
def text_pages():
    """{module: (exit code, its page, errors)}: one ansible-doc for every module (one process costs what one
    module costs); a module that breaks the text mode stops that run with no page at all, so then each module runs
    alone and every case shows its own error."""
    rc, out, err = ansible_doc_text(*sorted(MODULES))
    if rc == 0:
        return {name: (rc, page, err) for name, page in split_pages(out).items()}
    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(sorted(MODULES), pool.map(ansible_doc_text, sorted(MODULES)), strict=True))


def module_doc(rendered, name):
    rc, out, err = rendered
    assert rc == 0, err
    return json.loads(out)[name]


class _Built(Exception):
    def __init__(self, kwargs):
        super().__init__("AnsibleModule built")
        self.kwargs = kwargs


def built_spec(name):
    """The keyword arguments the module's main() passes to AnsibleModule (nothing else of main() runs)."""
    if name in ACTION_SPECS:
        return {"argument_spec": ACTION_SPECS[name]}
    module = __import__(f"ansible.modules.{name}", fromlist=["main"])

    def build(self, **kwargs):
        raise _Built(kwargs)

    with (
        patch_module_args({}),
        mock.patch.object(basic.AnsibleModule, "__init__", build),
        pytest.raises(_Built) as built,
    ):
        module.main()
    return built.value.kwargs


def option_problems(where, documented, spec):
    """Differences between documented options and an argument spec, recursing into suboptions."""
    problems = []
    for name in sorted(set(documented) | set(spec)):
        if name not in spec:
            problems.append(f"{where}{name}: documented, not in the argument spec")
            continue
        if name not in documented:
            problems.append(f"{where}{name}: in the argument spec, not documented")
            continue
        doc, arg = documented[name], spec[name]
        for field, missing in FIELD_DEFAULTS.items():
            doc_value, arg_value = doc.get(field, missing), arg.get(field, missing)
            if field in ("choices", "aliases") and doc_value and arg_value:
                doc_value, arg_value = sorted(doc_value), sorted(arg_value)
            if doc_value != arg_value:
                problems.append(f"{where}{name}: {field} documented {doc_value!r}, argument spec {arg_value!r}")
        if doc.get("suboptions") or arg.get("options"):
            problems += option_problems(f"{where}{name}.", doc.get("suboptions") or {}, arg.get("options") or {})
    return problems


def test_every_module_is_covered():
    assert {"vllm_record", "vllm_staged_start", "hf_snapshot", "roce_netdev"} <= set(MODULES)
    assert set(LIBRARIES) >= {"library", "roles/hf_model/library", "roles/roce_network/library"}


def test_ansible_doc_renders_every_module(rendered):
    rc, out, err = rendered
    assert rc == 0, err
    docs = json.loads(out)
    assert sorted(docs) == sorted(MODULES)
    for name, doc in docs.items():
        assert doc["doc"]["module"] == name and doc["doc"]["short_description"], name
        assert doc["doc"]["filename"] == str(ROOT / MODULES[name] / f"{name}.py"), name
        assert doc["examples"].strip() and doc["return"], f"{name}: EXAMPLES and RETURN must not be empty"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_ansible_doc_text_mode_renders_the_whole_page(text_pages, rendered, name):
    rc, page, err = text_pages.get(name, (None, "", "ansible-doc printed no page for it"))
    assert rc == 0 and "ERROR" not in err, err
    assert "Traceback" not in page + err, page + err
    assert page.startswith(f"> MODULE {name} ({ROOT / MODULES[name] / name}.py)\n"), page[:200]
    # ansible-doc 2.19's page leaves out short_description (only -l and -s print it): every option and return
    # key having its entry shows the rest of the page was formatted.
    doc = module_doc(rendered, name)
    head, returns = page.partition("\nRETURN VALUES:\n")[::2]
    missing = [key for key in doc["doc"].get("options") or {} if not re.search(rf"^[-=] {key}\b", head, re.M)]
    missing += [key for key in doc["return"] if not re.search(rf"^- {key}\b", returns, re.M)]
    assert missing == [], f"{name}: no entry on its page"
    assert "\nEXAMPLES:\n" in head, f"{name}: no examples on its page"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_documented_options_match_the_argument_spec(rendered, name):
    doc = module_doc(rendered, name)["doc"]
    assert option_problems("", doc.get("options") or {}, built_spec(name)["argument_spec"]) == []


def test_check_mode_attribute_matches_what_the_module_supports(rendered):
    checked = []
    for name in sorted(MODULES):
        support = (module_doc(rendered, name)["doc"].get("attributes") or {}).get("check_mode", {}).get("support")
        if support is not None:
            supports = name in ACTION_SPECS or built_spec(name).get("supports_check_mode", False)
            assert (support in ("full", "partial")) == bool(supports), f"{name}: check_mode support {support}"
            checked.append(name)
    assert {"vllm_acceptance", "vllm_benchmark", "vllm_diagnose"} <= set(checked)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_return_entries_are_complete(rendered, name):
    returns = module_doc(rendered, name)["return"]
    incomplete = [key for key, entry in returns.items() if not {"description", "returned", "type"} <= set(entry)]
    assert incomplete == [], f"{name}: RETURN entries without description, returned or type"


def names_in_code(name):
    """String constants and keyword-argument names in a module, the project module_utils it imports and its
    action plugin: every key it can return is among them."""
    sources = [ROOT / MODULES[name] / f"{name}.py"] + [ROOT / "action_plugins" / f"{name}.py"]
    names, read = set(), set()
    while sources:
        path = sources.pop()
        if not path.exists() or path in read:
            continue
        read.add(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                names.add(node.value)
            elif isinstance(node, ast.keyword) and node.arg:
                names.add(node.arg)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ansible.module_utils."):
                sources.append(ROOT / "module_utils" / f"{node.module.rsplit('.', 1)[-1]}.py")
    return names


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_documented_return_is_in_the_code(rendered, name):
    stale = sorted(set(module_doc(rendered, name)["return"]) - names_in_code(name))
    assert stale == [], f"{name} documents return keys its code never names"


def test_the_comparison_catches_drift():
    spec = {"url": {"type": "str", "required": True}, "items": {"type": "list", "elements": "dict", "options": {}}}
    documented = {
        "url": {"type": "str"},
        "items": {"type": "list", "elements": "str", "suboptions": {"x": {"type": "int"}}},
        "gone": {"type": "int"},
    }
    assert option_problems("", documented, spec) == [
        "gone: documented, not in the argument spec",
        "items: elements documented 'str', argument spec 'dict'",
        "items.x: documented, not in the argument spec",
        "url: required documented False, argument spec True",
    ]


def test_the_openai_endpoint_modules_share_spec_and_fragment(rendered):
    from ansible.module_utils.openai_client import api_argument_spec

    shared = api_argument_spec()
    for name in ("vllm_acceptance", "vllm_benchmark", "vllm_diagnose"):
        spec = built_spec(name)["argument_spec"]
        assert {key: spec[key] for key in shared} == shared, name
        doc = module_doc(rendered, name)["doc"]
        assert doc["attributes"]["check_mode"]["support"] == "full", name
        source = (ROOT / "library" / f"{name}.py").read_text()
        docs = yaml.safe_load(source.split('DOCUMENTATION = r"""', 1)[1].split('"""', 1)[0])
        assert not set(shared) & set(docs["options"]), f"{name} documents the shared options itself"
