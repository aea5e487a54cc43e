"""The Prometheus rules of roles/monitoring (templates/spark-serve-rules.yml.j2) do what their promtool tests say.

Rendered with the role's defaults they pass `promtool check rules` and tests/unit/promtool/spark-serve-rules.test.yml,
where every alert fires in one case and stays quiet in another (a busy, progressing engine fires nothing) and every
recording rule gives its value. Every threshold variable reaches its rule: its group of thresholds.test.yml passes
with that one value changed and fails with the defaults. Every alert carries a severity and a summary, and no rule
touches the API key.
"""

import json
import re
import shutil
from pathlib import Path

import jinja2
import jinja2.meta
import pytest
import yaml

from tests.runner import ROOT, promtool

TEMPLATE = ROOT / "roles/monitoring/templates/spark-serve-rules.yml.j2"
PROMTOOL_TESTS = Path(__file__).parent / "promtool"
DEFAULTS = yaml.safe_load((ROOT / "roles/monitoring/defaults/main.yml").read_text())
THRESHOLDS = yaml.safe_load((PROMTOOL_TESTS / "thresholds.test.yml").read_text())
# Ansible's template module trims a block tag's newline too.
ENV = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True, keep_trailing_newline=True)


def render(directory: Path, **changed) -> dict:
    """Write the rules where the promtool tests' rule_files expect them (beside the test file)."""
    variables = {**DEFAULTS, "ansible_managed": "Ansible managed", **changed}
    text = ENV.from_string(TEMPLATE.read_text()).render(variables)
    (directory / "spark-serve-rules.yml").write_text(text)
    return yaml.safe_load(text)


def test_rules_pass_their_promtool_tests(tmp_path):
    render(tmp_path)
    shutil.copy(PROMTOOL_TESTS / "spark-serve-rules.test.yml", tmp_path)
    for command, name in (("check", "spark-serve-rules.yml"), ("test", "spark-serve-rules.test.yml")):
        result = promtool(command, "rules", tmp_path / name)
        assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_fires_and_stays_quiet_and_every_recording_rule_is_tested(tmp_path):
    groups = render(tmp_path)["groups"]
    alerts = {rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule}
    records = {rule["record"] for group in groups for rule in group["rules"] if "record" in rule}
    tests = yaml.safe_load((PROMTOOL_TESTS / "spark-serve-rules.test.yml").read_text())["tests"]
    cases = [case for group in tests for case in group.get("alert_rule_test", [])]
    assert {case["alertname"] for case in cases if case.get("exp_alerts")} == alerts
    assert {case["alertname"] for case in cases if not case.get("exp_alerts")} == alerts
    assert {case["expr"] for group in tests for case in group.get("promql_expr_test", [])} == records


def test_alerts_carry_severity_and_summary_and_never_the_api_key(tmp_path):
    rules = [rule for group in render(tmp_path)["groups"] for rule in group["rules"]]
    for rule in rules:
        text = (rule["expr"] + str(rule.get("annotations", ""))).lower()
        assert "api_key" not in text and "authorization" not in text, rule
        if "alert" in rule:
            assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule["alert"]
            assert rule["annotations"]["summary"], rule["alert"]


def test_every_threshold_has_a_group():
    used = jinja2.meta.find_undeclared_variables(ENV.parse(TEMPLATE.read_text())) - {"ansible_managed"}
    assert {group["name"].split()[0] for group in THRESHOLDS["tests"]} == used


@pytest.mark.parametrize("group", THRESHOLDS["tests"], ids=lambda group: group["name"])
def test_threshold_reaches_its_rule(tmp_path, group):
    variable, value = group["name"].split()
    (tmp_path / "t.test.yml").write_text(yaml.safe_dump({**THRESHOLDS, "tests": [group]}))
    render(tmp_path, **{variable: yaml.safe_load(value)})
    changed = promtool("test", "rules", tmp_path / "t.test.yml")
    assert changed.returncode == 0, changed.stdout + changed.stderr
    render(tmp_path)
    default = promtool("test", "rules", tmp_path / "t.test.yml")
    # With the default an alert fires where none is expected or the reverse, not just with other annotations.
    assert default.returncode != 0 and ("exp:[]" in default.stderr or "got:[]" in default.stderr), default.stderr


def test_the_dashboard_uses_only_recorded_names_and_describes_every_panel(tmp_path):
    """roles/monitoring/files/grafana-dashboard.json (for Grafana users; its queries run on the test bed's Prometheus
    in tests/testbed/test_service.py): each spark_serve: name it queries is recorded by the rules."""
    records = {rule["record"] for group in render(tmp_path)["groups"] for rule in group["rules"] if "record" in rule}
    dashboard = json.loads((ROOT / "roles/monitoring/files/grafana-dashboard.json").read_text())
    panels = dashboard["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels) and all(p["description"] for p in panels)
    names = {name for p in panels for t in p["targets"] for name in re.findall(r"spark_serve:[a-z0-9_:]+", t["expr"])}
    assert names and names <= records, names - records
