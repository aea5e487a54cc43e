"""Benchmark: seconds to validate each shipped profile in a cold process, vs. the seed's 9-10 min load.

Three measurements per profile, each a fresh process (nothing cached in memory):
  rules    - a cold `python` that checks the schema and runs the vllm_args rules for every rank
  module   - `ansible localhost -m vllm_args` ad hoc, every rank (adds Ansible's own start-up)
  playbook - `ansible-playbook site.yml --check` on a local inventory (the whole validation stage)
Prints a Markdown table; the 2 s target applies to the validation itself (rules).
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.profiles import local_inventory, profiles, validate_argv, vllm_args_params
from tests.runner import BIN, command_env

SEED_LOAD_S = (540, 600)  # seed 000: a full cold start takes 9-10 minutes


def timed(args):
    start = time.perf_counter()
    proc = subprocess.run(args, cwd=ROOT, env=command_env(), capture_output=True, text=True, timeout=300)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"validation failed: {' '.join(args[:4])}\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return elapsed


def module_seconds(name, prof):
    total = 0.0
    for rank in range(prof["nodes"]):
        params = vllm_args_params(prof, rank=rank, config_as_path=True)
        total += timed(
            [
                str(BIN / "ansible"),
                "localhost",
                "-c",
                "local",
                "-i",
                "localhost,",
                "-M",
                "library",
                "-m",
                "vllm_args",
                "-e",
                f"ansible_python_interpreter={sys.executable}",
                "-a",
                json.dumps(params),
            ]
        )
    return total


RULES = """
import sys
sys.path[:0] = [{root!r}]
import ansible.module_utils
ansible.module_utils.__path__.append({root!r} + "/module_utils")
import jsonschema
from ansible.module_utils.engine_rules import plan
from tests.profiles import SCHEMA, profile, vllm_args_params
prof = profile({name!r})
assert not list(jsonschema.Draft202012Validator(SCHEMA).iter_errors(prof))
for rank in range(prof["nodes"]):
    assert not plan(vllm_args_params(prof, rank=rank))["violations"]
"""


def rules_seconds(name):
    return timed([sys.executable, "-c", RULES.format(root=str(ROOT), name=name)])


def playbook_seconds(name):
    with tempfile.TemporaryDirectory() as tmp:
        inv = local_inventory(Path(tmp), name)
        return timed(validate_argv(inv, f"{tmp}/state"))


def main():
    print("| profile | ranks | rules cold (s) | vllm_args ad hoc (s) | site.yml --check (s) | seed load / rules |")
    print("|---|---|---|---|---|---|")
    worst = 0.0
    for name, prof in sorted(profiles().items()):
        rules_s = rules_seconds(name)
        module_s = module_seconds(name, prof)
        playbook_s = playbook_seconds(name)
        worst = max(worst, rules_s)
        ratio = f"{SEED_LOAD_S[0] / rules_s:.0f}x-{SEED_LOAD_S[1] / rules_s:.0f}x"
        print(f"| {name} | {prof['nodes']} | {rules_s:.2f} | {module_s:.2f} | {playbook_s:.2f} | {ratio} |")
    verdict = "meets" if worst <= 2.0 else "MISSES"
    print(
        f"\nslowest validation (schema + rules, all ranks, cold process): {worst:.2f} s, {verdict} the 2 s target; "
        f"load average {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
