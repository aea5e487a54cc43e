"""roles/monitoring's Prometheus and Alertmanager files as the role renders them (template module, connection
local), checked by promtool; and playbooks/monitoring.yml refusing an inventory without a monitoring host before it
reaches any node."""

import pytest
import yaml

from tests.runner import ROOT, ansible_playbook, promtool

pytestmark = pytest.mark.playbook

HEAD = {"service": "pair", "target": "10.0.0.10:8443"}
NODES = [{"service": "pair", "node": f"spark-{n}", "target": f"10.0.0.1{n}:9100"} for n in "ab"]


def render(tmp_path, **variables):
    """prometheus.yml and alertmanager.yml rendered into tmp_path with the role's defaults and these variables."""
    tasks = [
        {
            "name": name,
            "ansible.builtin.template": {
                "src": f"{ROOT}/roles/monitoring/templates/{name}.j2",
                "dest": f"{tmp_path}/{name}",
            },
        }
        for name in ("prometheus.yml", "alertmanager.yml")
    ]
    defaults = yaml.safe_load((ROOT / "roles/monitoring/defaults/main.yml").read_text())
    play = {
        "name": "render",
        "hosts": "localhost",
        "gather_facts": False,
        "vars": {**defaults, **variables},
        "tasks": tasks,
    }
    (tmp_path / "render.yml").write_text(yaml.safe_dump([play], sort_keys=False))
    local = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {"localhost": local}}}))
    rc, out = ansible_playbook("-i", str(tmp_path / "hosts.yml"), str(tmp_path / "render.yml"))
    assert rc == 0, out[-3000:]
    return {name: yaml.safe_load((tmp_path / name).read_text()) for name in ("prometheus.yml", "alertmanager.yml")}


@pytest.mark.parametrize(
    "variables",
    [
        {},
        {"monitoring_engine_targets": [HEAD], "monitoring_node_targets": NODES},
        {
            "monitoring_engine_targets": [HEAD],
            "monitoring_node_targets": NODES,
            "monitoring_webhooks": ["https://hooks.example/spark", "http://127.0.0.1:9199/x"],
        },
        {
            "monitoring_engine_targets": [HEAD],
            "monitoring_node_targets": NODES,
            "monitoring_router_targets": [{"service": "router", "target": "10.0.0.5:8443"}],
        },
    ],
    ids=["no-targets", "pair", "pair-with-webhooks", "fleet-replica-with-its-router"],
)
def test_the_rendered_configuration_passes_promtool_and_names_every_target(tmp_path, variables):
    files = render(tmp_path, **variables)
    checked = promtool("check", "config", "--syntax-only", tmp_path / "prometheus.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    jobs = {job["job_name"]: job for job in files["prometheus.yml"]["scrape_configs"]}
    scraped = {target for job in jobs.values() for group in job["static_configs"] for target in group["targets"]}
    kinds = ("monitoring_engine_targets", "monitoring_node_targets", "monitoring_router_targets")
    assert scraped == {target["target"] for kind in kinds for target in variables.get(kind, [])}
    for job in ("spark-serve-engine", "spark-serve-router")[: 1 + ("monitoring_router_targets" in variables)]:
        assert jobs[job]["scheme"] == "https" and "ca_file" in jobs[job]["tls_config"], job
    receivers = files["alertmanager.yml"]["receivers"]
    hooks = [hook["url"] for receiver in receivers for hook in receiver.get("webhook_configs", [])]
    assert hooks == variables.get("monitoring_webhooks", [])
    assert files["alertmanager.yml"]["route"]["receiver"] == receivers[0]["name"]


def test_an_inventory_without_a_monitoring_host_is_refused_before_any_node(tmp_path):
    rc, out = ansible_playbook("-i", "inventories/spark-pair", "playbooks/monitoring.yml")
    assert rc != 0 and "spark_monitoring: the inventory has no such group, or it is empty" in out, out[-3000:]
    assert "spark-a" not in out.split("PLAY RECAP")[-1], "no node is reached"
