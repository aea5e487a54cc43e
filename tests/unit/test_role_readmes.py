"""Every role's README is what tools/gen_role_readme.py makes of its meta/argument_specs.yml (CI catches drift:
edit the specs, then `make docs`)."""

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
    """The cells of a Markdown table row, split at every pipe, escaped or not: only GitHub's table extension reads
    `\\|` as a pipe inside a cell (inside a code span too); other renderers end the cell there or show the backslash,
    so a generated cell holds no pipe at all (`&#124;`, in `<code>` inside code)."""
    return line.split("|")[1:-1]


def broken_table_rows(markdown):
    """Every table row whose cell count differs from its header's, that does not start and end with a pipe, or that
    goes on on the next line (a line break in a cell ends the row; the rest is a stray paragraph)."""
    lines, bad, header = markdown.splitlines(), [], None
    for number, line in enumerate(lines, 1):
        if not line.startswith("|"):
            header = None
            continue
        cells = len(table_cells(line))
        if header is None:
            header = cells
        if cells != header or not line.rstrip().endswith("|"):
            bad.append(f"line {number}: {cells} cells, the header has {header}: {line[:100]}")
        following = lines[number] if number < len(lines) else ""
        if following.strip() and not following.startswith("|"):
            bad.append(f"line {number + 1} goes on with the row above: {following[:100]}")
    return bad


README_FILES = sorted((ROOT / "roles").glob("*/README.md"))


@pytest.mark.parametrize("readme", README_FILES, ids=[readme.parent.name for readme in README_FILES])
def test_every_table_row_of_every_role_readme_has_its_headers_cells(readme):
    """The committed file, every table in it: a pipe in a default (a Jinja filter) or a line break would end a cell
    and shift the row."""
    assert broken_table_rows(readme.read_text()) == []


@pytest.mark.parametrize("role", ROLES, ids=[role.name for role in ROLES])
def test_every_rendered_table_row_has_its_headers_cells(role):
    assert broken_table_rows(render(role)) == []


def test_every_role_readme_is_checked():
    assert {readme.parent for readme in README_FILES} == set(ROLES)


def test_the_row_check_finds_what_breaks_a_row():
    header = "| a | b |\n|---|---|\n"
    assert broken_table_rows(header + "| `x` | y |\n\nafter\n") == []
    assert len(broken_table_rows(header + "| `{{ x \\| first }}` | y |\n")) == 1
    assert len(broken_table_rows(header + "| `[a,\n  b]` | y |\n")) == 2
    assert len(broken_table_rows(header + "| x | y\n")) == 1


@pytest.mark.parametrize(
    "default",
    [
        "{{ a | first }}",
        "{{ groups['x'] | default([])\n   | map('extract', hostvars, 'ansible_host') | list }}",
        "a\r\nb\u2028c",
        "{{ '`' | x }}",
        "a \\| b",
        "<b>&amp;|",
    ],
)
def test_any_default_or_description_stays_in_its_cell(default):
    from tools.gen_role_readme import option_rows

    (row,) = option_rows({"x": {"type": "str", "default": default, "description": f"One | C({default}) two."}})
    assert broken_table_rows("| 1 | 2 | 3 | 4 | 5 |\n|---|---|---|---|---|\n" + row) == [], row


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
