"""The README and docs/ against the code: the lists a newcomer reads (playbooks, roles, modules, profiles, rule names,
case counts) name exactly what exists, and the front page stays a front page."""

import ast
import re
from pathlib import Path

import yaml

from tests.hostile_cases import CASES
from tests.profiles import profiles

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"


def table_column(text, heading):
    """First-column names (in backticks) of the Markdown table that follows `heading`."""
    section = text.split(heading, 1)[1]
    rows = []
    for line in section.splitlines()[1:]:
        if line.startswith("|"):
            rows.append(line)
        elif rows:
            break
    return {m.group(1) for row in rows[2:] for m in [re.match(r"\| `([^`]+)`", row)] if m}


def test_the_front_page_is_short_and_links_every_page():
    assert len(README.splitlines()) <= 120
    for page in DOCS.glob("*.md"):
        assert f"docs/{page.name}" in README, f"docs/{page.name} is not linked from the README"
    for linked in re.findall(r"`(docs/[a-z-]+\.md)`", README):
        assert (ROOT / linked).exists(), f"the README links {linked}, which does not exist"


def test_the_readme_names_every_playbook_and_role():
    for book in (ROOT / "playbooks").glob("*.yml"):
        if book.stem != "profile":  # imported by the others, never run on its own
            assert f"playbooks/{book.name}" in README, book.name
    for role in (ROOT / "roles").iterdir():
        assert f"roles/{role.name}" in README, role.name


def test_the_molecule_scenarios_are_counted_and_the_roles_without_one_named():
    """The README and docs/tests.md say which node-preparing roles (playbooks/prepare.yml) have a Molecule scenario
    (molecule/<role>) and name the ones without."""
    plays = yaml.safe_load((ROOT / "playbooks" / "prepare.yml").read_text())
    preparing = {entry["role"] for play in plays for entry in play.get("roles", [])}
    scenarios = {path.parent.name for path in (ROOT / "molecule").glob("*/molecule.yml")}
    assert scenarios <= preparing
    words = dict(enumerate(["no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]))
    (row,) = [line for line in README.splitlines() if line.startswith("| `molecule/`")]
    assert f"of {words[len(scenarios)]} of the {words[len(preparing)]} node-preparing roles" in row, row
    tests_page = " ".join((DOCS / "tests.md").read_text().split())
    assert f"the {len(scenarios)} Molecule scenarios, one per node-preparing role but" in tests_page
    for role in preparing - scenarios:
        assert f"`{role}`" in row and f"but `{role}`" in tests_page, role


def test_the_architecture_page_lists_exactly_the_modules_and_module_utils():
    page = (DOCS / "architecture.md").read_text()
    modules = {p.stem for p in [*(ROOT / "library").glob("*.py"), *(ROOT / "roles").glob("*/library/*.py")]}
    assert table_column(page, "## Modules") == modules
    assert table_column(page, "## module_utils") == {p.stem for p in (ROOT / "module_utils").glob("*.py")}


def test_the_profiles_page_lists_exactly_the_shipped_profiles():
    page = (DOCS / "profiles.md").read_text()
    # The profile table comes before the field table; a row may name two profiles (`baseline`, `no-prefix`).
    first_cells = re.findall(r"^\| (`[^|]+`) \|", page.split("Profile fields")[0], re.M)
    listed = {name.strip("` ") for cell in first_cells for name in cell.split(",")}
    assert listed == set(profiles())


def rule_names_in_code():
    """Every rule name the engine's rule sets (module_utils/engine_*.py) pass to a refusal as a literal."""
    trees = [ast.parse(path.read_text()) for path in (ROOT / "module_utils").glob("engine_*.py")]
    return {
        node.args[2].value
        for tree in trees
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("fail", "violation")
        and len(node.args) >= 3
        and isinstance(node.args[2], ast.Constant)
    }


def test_the_profiles_page_names_exactly_the_rules_the_code_refuses_by():
    page = (DOCS / "profiles.md").read_text()
    code = rule_names_in_code()
    assert len(code) > 30, "the scan found too few rules to mean anything"
    assert table_column(page, "### Rule names") == code


def test_the_hostile_case_count_is_the_test_files_own():
    page = (DOCS / "profiles.md").read_text()
    stated = re.search(r"(\d+) cases in `tests/hostile_cases.py`", page)
    assert stated and int(stated.group(1)) == len(CASES), (stated and stated.group(1), len(CASES))


def test_no_test_module_imports_another():
    """Shared test helpers live in helper modules (tests/runner.py, tests/profiles.py, tests/hostile_cases.py,
    tests/testbed/helpers.py, ...): a test module imported by another would run its tests' collection twice."""
    importers = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            importers += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[-1].startswith("test_")]
    assert importers == []


def test_every_playbook_a_test_runs_goes_through_one_command_line():
    """tests/runner.py's ansible_playbook_argv() is the only place a test, benchmark or the demo names the
    ansible-playbook program on a command line: one environment, one PATH, one project root for every run (a
    stand-in program a test writes may still be called so)."""
    spelled = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        if path != ROOT / "tests" / "runner.py"
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if re.search(r"""BIN / ["']ansible-playbook["']|["']ansible-playbook["'],""", line)
    ]
    assert spelled == []
