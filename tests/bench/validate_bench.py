"""Benchmark: seconds to validate each shipped profile in a cold process, vs. the seed's 9-10 min load.

Two measurements per profile, each a fresh process (nothing cached in memory):
  module   - `ansible localhost -m vllm_args` ad hoc, every rank (what a user or a check runs)
  playbook - `ansible-playbook site.yml --check` on a local inventory (the whole validation stage)
Prints a Markdown table; the target is <= 2 s per profile for the module run.
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

from tests.playbook.test_validate_playbook import local_inventory  # noqa: E402
from tests.profiles import profiles, vllm_args_params  # noqa: E402

BIN = Path(sys.executable).parent
SEED_LOAD_S = (540, 600)  # seed 000: a full cold start takes 9-10 minutes
ENV = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), PATH=f"{BIN}:{os.environ['PATH']}")


def timed(args):
    start = time.perf_counter()
    proc = subprocess.run(args, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"validation failed: {' '.join(args[:4])}\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return elapsed


def module_seconds(name, prof):
    total = 0.0
    for rank in range(prof["nodes"]):
        params = vllm_args_params(prof, rank=rank)
        params.pop("tuned_config_files")
        params["model_config"] = str(ROOT / prof["model"]["config"])
        params = {k: v for k, v in params.items() if v is not None}
        total += timed([str(BIN / "ansible"), "localhost", "-c", "local", "-i", "localhost,", "-M", "library",
                        "-m", "vllm_args", "-e", f"ansible_python_interpreter={sys.executable}",
                        "-a", json.dumps(params)])
    return total


def playbook_seconds(name):
    with tempfile.TemporaryDirectory() as tmp:
        inv = local_inventory(Path(tmp), name)
        return timed([str(BIN / "ansible-playbook"), "site.yml", "--check", "-i", str(inv),
                      "-e", f"spark_serve_controller_dir={tmp}/state"])


def main():
    print("| profile | ranks | vllm_args cold (s) | site.yml --check (s) | seed load / vllm_args |")
    print("|---|---|---|---|---|")
    worst = 0.0
    for name, prof in sorted(profiles().items()):
        module_s = module_seconds(name, prof)
        playbook_s = playbook_seconds(name)
        per_rank = module_s / prof["nodes"]
        worst = max(worst, module_s)
        ratio = f"{SEED_LOAD_S[0] / module_s:.0f}x-{SEED_LOAD_S[1] / module_s:.0f}x"
        print(f"| {name} | {prof['nodes']} | {module_s:.2f} ({per_rank:.2f}/rank) | {playbook_s:.2f} | {ratio} |")
    verdict = "meets" if worst <= 2.0 else "MISSES"
    print(f"\nslowest profile validation (all ranks, cold processes): {worst:.2f} s — {verdict} the 2 s target")


if __name__ == "__main__":
    main()
