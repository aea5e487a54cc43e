"""Every role's README is what tools/gen_role_readme.py makes of its meta/argument_specs.yml (CI catches drift:
edit the specs, then `make docs`)."""

import re
import shutil

import pytest
import yaml

from tools.gen_role_readme import ROOT, main, render, roles

ROLES = roles()


def test_every_role_has_specs_and_is_checked():
    assert {role.name for role in ROLES} >= {"roce_network", "hf_model", "vllm_service", "vllm_release"}


@pytest.mark.parametrize("role", ROLES, ids=[role.name for role in ROLES])
def test_readme_matches_the_argument_specs(role):
    readme = role / "README.md"
    assert readme.exists(), f"{readme.relative_to(ROOT)} missing: run `make docs`"
    assert readme.read_text() == render(role), f"{readme.relative_to(ROOT)} drifted from its specs: run `make docs`"


@pytest.mark.parametrize("role", ROLES, ids=[role.name for role in ROLES])
def test_readme_names_every_variable_with_its_type(role):
    text = render(role)
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    for spec in specs.values():
        for name, option in (spec.get("options") or {}).items():
            assert f"| `{name}` | {option.get('type', 'str')}" in text, name


def table_cells(line):
    """The cells of a Markdown table row: split at every pipe not escaped with a backslash."""
    return re.split(r"(?<!\\)\|", line)[1:-1]


@pytest.mark.parametrize("role", ROLES, ids=[role.name for role in ROLES])
def test_every_table_row_has_the_headers_cells(role):
    """A pipe inside a default (a Jinja filter) or a line break would end a cell and shift the row."""
    header, bad = None, []
    for number, line in enumerate(render(role).splitlines(), 1):
        if not line.startswith("|"):
            header = None
        elif header is None:
            header = len(table_cells(line))
        elif len(table_cells(line)) != header or not line.endswith("|"):
            bad.append(f"line {number}: {line[:100]}")
    assert bad == []


def test_a_pipe_in_a_default_stays_in_its_cell():
    from tools.gen_role_readme import option_rows

    (row,) = option_rows({"x": {"type": "str", "default": "{{ a | first }}", "description": "One | two."}})
    assert len(table_cells(row)) == 5, row


def test_markup_becomes_markdown_and_tags_outside_code_are_escaped():
    from tools.gen_role_readme import text

    assert text("Named C(<project>-rank<N>) or <project>-rank<N>; I(may) change, see O(x).") == [
        "Named `<project>-rank<N>` or &lt;project>-rank&lt;N>; *may* change, see `x`."
    ]


def test_a_changed_spec_is_reported_as_drift(tmp_path, monkeypatch, capsys):
    role = tmp_path / "roles" / "demo"
    shutil.copytree(ROOT / "roles" / "roce_network" / "meta", role / "meta")
    monkeypatch.setattr("tools.gen_role_readme.ROOT", tmp_path)
    assert main([]) == 0 and (role / "README.md").exists()
    assert main(["--check"]) == 0
    specs = role / "meta" / "argument_specs.yml"
    specs.write_text(specs.read_text().replace("default: 9000", "default: 1500"))
    assert main(["--check"]) == 1
    assert (
        "1 README(s) differ from their argument specs (run `make docs`): roles/demo/README.md"
        in capsys.readouterr().out
    )
    assert "| `roce_network_mtu` | int |  | `1500` |" in render(role)
