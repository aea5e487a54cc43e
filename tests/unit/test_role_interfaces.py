"""Each role's interface, written in more than one place, says the same thing everywhere.

A role's defaults are written twice: defaults/main.yml is what runs (Ansible never applies an argument spec's
`default:` to a role's variables), meta/argument_specs.yml is what the role's README shows and `ansible-doc` prints.
"""

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(path.parent.parent for path in (ROOT / "roles").glob("*/meta/argument_specs.yml"))


def role_defaults(role):
    path = role / "defaults" / "main.yml"
    return (yaml.safe_load(path.read_text()) if path.exists() else None) or {}


def spec_defaults(role):
    """(entry point, option, default) for every option of every entry point that has a `default:`."""
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    return [
        (entry, name, option["default"])
        for entry, spec in specs.items()
        for name, option in (spec.get("options") or {}).items()
        if "default" in option
    ]


def same_yaml_value(a, b):
    """Equal as YAML values: the same type too (`1` is not `1.0` or `true`); a Jinja string compares as its text."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_yaml_value(a[key], b[key]) for key in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same_yaml_value(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def drift(role):
    """{option: what differs} for every spec default that defaults/main.yml does not set to the same value."""
    defaults, found = role_defaults(role), {}
    for entry, name, documented in spec_defaults(role):
        if name not in defaults:
            found[name] = f"{entry}: the spec's default {documented!r} is set nowhere in defaults/main.yml"
        elif not same_yaml_value(documented, defaults[name]):
            found[name] = f"{entry}: spec {documented!r}, defaults/main.yml {defaults[name]!r}"
    return found


@pytest.mark.parametrize("role", ROLES, ids=[role.name for role in ROLES])
def test_every_spec_default_is_the_value_defaults_main_sets(role):
    assert drift(role) == {}, f"roles/{role.name}: edit meta/argument_specs.yml (defaults/main.yml is what runs)"


def test_the_comparison_is_of_yaml_values():
    assert same_yaml_value({"a": [1, "{{ x | y }}"]}, {"a": [1, "{{ x | y }}"]})
    assert not same_yaml_value(1, 1.0)
    assert not same_yaml_value(True, 1)
    assert not same_yaml_value("{{ x|y }}", "{{ x | y }}")
    assert not same_yaml_value(8000, "{{ vllm_service_profile.engine.port | default(8000) }}")
    assert len([default for role in ROLES for default in spec_defaults(role)]) > 200


# Registered results a role leaves in the play's variables are named after the role, like its inputs, so a reader
# (and another role) knows whose they are; registers that do not yet, in roles another change owns at the time of
# writing: rename them there (and every use), then take them off this list. Empty: every role complies.
UNPREFIXED_REGISTERS: set[tuple[str, str]] = set()


def tasks_in(node):
    """Every task of a task file, inside blocks, rescues and always sections too."""
    for task in node or []:
        if isinstance(task, dict):
            yield task
            for section in ("block", "rescue", "always"):
                yield from tasks_in(task.get(section))


def registers():
    """(role, file, register name) for every `register:` in every role's task and handler files."""
    return [
        (path.parts[-3], path.relative_to(ROOT).as_posix(), task["register"])
        for pattern in ("roles/*/tasks/*.yml", "roles/*/handlers/*.yml")
        for path in sorted(ROOT.glob(pattern))
        for task in tasks_in(yaml.safe_load(path.read_text()))
        if "register" in task
    ]


def test_every_register_is_found():
    """The walk above sees every `register:` line (none is missed in a nested section)."""
    lines = [
        line
        for pattern in ("roles/*/tasks/*.yml", "roles/*/handlers/*.yml")
        for path in ROOT.glob(pattern)
        for line in path.read_text().splitlines()
        if line.strip().startswith("register:")
    ]
    assert len(registers()) == len(lines) > 100


def test_every_register_starts_with_its_roles_name():
    unprefixed = {(role, name) for role, _, name in registers() if not name.startswith(f"{role}_")}
    assert unprefixed - UNPREFIXED_REGISTERS == set(), "name each register <role>_<what>, and rename every use of it"
    assert unprefixed >= UNPREFIXED_REGISTERS, f"renamed, take off the list: {UNPREFIXED_REGISTERS - unprefixed}"


def test_no_register_shadows_an_input():
    """A register outranks every role default and inventory variable: one named like an input would replace it."""
    inputs = {name for role in ROLES for name in role_defaults(role)}
    inputs |= {name for role in ROLES for _, name, _ in spec_defaults(role)}
    for role in ROLES:
        specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
        inputs |= {name for spec in specs.values() for name in spec.get("options") or {}}
    assert sorted({f"{file}: {name}" for _, file, name in registers() if name in inputs}) == []
