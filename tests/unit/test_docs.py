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


# Where the code refuses by rule name: the rule sets, the modules, action plugins and roles' modules, the roles'
# tasks and the playbooks (the generated flag catalogs hold no rule).
RULE_SOURCES = (
    "module_utils/*.py",
    "library/*.py",
    "action_plugins/*.py",
    "roles/*/library/*.py",
    "roles/*/tasks/*.yml",
    "playbooks/*.yml",
)
# A rule named inside a message, `... [rule: image-base-pinned]` or `(rule: image-pinned; ...)`; a prose rule, `(rule:
# one router host)`, explains and names nothing.
RULE_IN_TEXT = re.compile(r"[\[(]rule: ([a-z][a-z0-9]*(?:-[a-z0-9]+)*)[\];)]")
RULE_NAME = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)+$")
WATCHDOG = ROOT / "roles" / "vllm_service" / "files" / "spark-serve-watchdog.py"
TROUBLESHOOTING = DOCS / "troubleshooting.md"


def name_text(node):
    """A rule's or an event's name as the page writes it: a literal, or an f-string with `<part>` for each computed
    part (`schema <validator>`, `engine-fails-<when>`); None for a variable (its literals are found where written)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if not isinstance(node, ast.JoinedStr):
        return None
    parts = []
    for part in node.values:
        if isinstance(part, ast.Constant):
            parts.append(part.value)
        else:  # the attribute or key it reads: error.validator, error['when'].replace(...)
            read = re.match(r"\w+(?:\.|\[['\"])(\w+)", ast.unparse(part.value))
            parts.append(f"<{read.group(1) if read else ast.unparse(part.value)}>")
    return "".join(parts)


def rule_positions(trees):
    """{function: index of its `rule` parameter, self aside} of every function that takes one."""
    return {
        node.name: params.index("rule")
        for tree in trees
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
        for params in [[arg.arg for arg in node.args.args if arg.arg != "self"]]
        if "rule" in params
    }


def paired_rule(node):
    """The rule of a (rule, message) pair a check returns or appends (module_utils/input_rules.py's), else None: a
    tuple of a label and a text elsewhere (`("hot-1", "hot")` in a loop) is no refusal."""
    if isinstance(node, ast.Return):
        pair = node.value
    elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "append" and len(node.args) == 1:
        pair = node.args[0]
    else:
        return None
    if not (isinstance(pair, ast.Tuple) and len(pair.elts) == 2 and name_text(pair.elts[1]) is not None):
        return None
    name = name_text(pair.elts[0])
    return name if name and RULE_NAME.match(name) else None


def rules_in_tree(tree, positions):
    """The rules one Python file passes to a function's `rule`, writes under a "rule" key, or pairs with a message."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            position = positions.get(getattr(node.func, "attr", getattr(node.func, "id", None)))
            if position is not None and len(node.args) > position:
                found.add(name_text(node.args[position]))
        if isinstance(node, ast.Dict):
            found |= {name_text(v) for k, v in zip(node.keys, node.values, strict=True) if name_text(k) == "rule"}
        found.add(paired_rule(node))
    return found - {None}


def rule_names(texts):
    """Every rule name in {path: text} of the rule sources."""
    trees = [ast.parse(text) for path, text in texts.items() if path.endswith(".py")]
    positions = rule_positions(trees)
    names = {name for text in texts.values() for name in RULE_IN_TEXT.findall(text)}
    return names.union(*(rules_in_tree(tree, positions) for tree in trees))


def rule_sources():
    """{path: text} of every rule source."""
    return {
        str(path): path.read_text()
        for pattern in RULE_SOURCES
        for path in sorted(ROOT.glob(pattern))
        if not path.name.startswith("vllm_flags_")
    }


def watchdog_events():
    """The events the watchdog records: those it exports (EVENTS) and every {"event": ...} it writes."""
    tree = ast.parse(WATCHDOG.read_text())
    exported = {
        element.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["EVENTS"]
        for element in node.value.elts
    }
    written = {
        name_text(value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Dict)
        for key, value in zip(node.keys, node.values, strict=True)
        if name_text(key) == "event"
    }
    return (exported | written) - {None}


def page_rows():
    """{name: row} of the troubleshooting page's tables, by the name in backticks in each row's first cell."""
    rows = TROUBLESHOOTING.read_text().splitlines()
    return {m.group(1): row for row in rows for m in [re.match(r"\| `([^`]+)` \|", row)] if m}


def test_the_rule_scan_finds_every_way_code_names_a_rule():
    texts = {
        "a.py": (
            "def fail(self, field, value, rule, message): pass\n"
            "def check(self, error):\n"
            "    self.fail('f', 1, 'named-rule', 'm')\n"
            "    self.fail('f', 1, f\"engine-fails-{error['when'].replace('_', '-')}\", 'm')\n"
            "    self.fail('f', 1, variable, 'm')\n"
            "    problems.append({'rule': f'schema {error.validator}'})\n"
            "    problems.append(('pair-rule', f'{error}'))\n"
            "    labels = [('hot-1', 'hot')]\n"
            "    return 'returned-rule', 'message'\n"
        ),
        "b.yml": "msg: x (rule: image-pinned; why) [rule: template] (rule: a prose rule)\n",
    }
    assert rule_names(texts) == {
        "named-rule",
        "engine-fails-<when>",
        "schema <validator>",
        "pair-rule",
        "returned-rule",
        "image-pinned",
        "template",
    }


def test_the_troubleshooting_page_names_exactly_the_rules_and_watchdog_events():
    rules, events = rule_names(rule_sources()), watchdog_events()
    assert len(rules) > 40 and len(events) >= 5, "the scan found too few names to mean anything"
    named = set(page_rows())
    assert sorted((rules | events) - named) == [], "emitted by the code, missing from docs/troubleshooting.md"
    assert sorted(named - rules - events) == [], "on docs/troubleshooting.md, emitted nowhere in the code"


def test_every_troubleshooting_row_says_what_to_run_next():
    for name, row in page_rows().items():
        commands = re.findall(r"`ansible-playbook ([^`\s]+)", row)
        assert commands, f"{name}: no ansible-playbook command to run next"
        assert all((ROOT / command).is_file() for command in commands), f"{name}: {commands}"
