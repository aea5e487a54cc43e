"""Stand-ins for the fleet's router host (test-bed node 2): its package index and its systemd.

- The router host reaches no package index here: `router_wheelhouse()` downloads vllm-router (pinned by
  roles/vllm_router) and its dependencies for the node's Python into a controller folder once per machine, which
  the test-bed fleet inventory names as vllm_router_wheelhouse.
- Test-bed nodes run no systemd: `router_service_standin()` runs what spark-serve-router.service says on node 2 as
  systemd would: Environment, ExecStart, then ExecStartPost; restarted when the process dies (Restart=always) or
  the unit file changes (what the role's restart does).
"""

import subprocess
import sys

import yaml

from tests.testbed.helpers import ROOT, node_exec

WHEELHOUSE = ROOT / ".testbed" / "wheels" / "router"
ROUTER_NODE = 2
NODE_PYTHON = "3.13"  # Debian trixie's, the test-bed nodes' (tests/testbed/testbed.py SUITE)
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]
UNIT = "/etc/systemd/system/spark-serve-router.service"
STANDIN_LOG = "/tmp/spark-serve-router.out"


def pinned_version():
    defaults = yaml.safe_load((ROOT / "roles/vllm_router/defaults/main.yml").read_text())
    return defaults["vllm_router_version"]


def router_wheelhouse():
    """The controller's wheelhouse for the router host (downloaded once; a failed download fails loudly)."""
    requirement = f"vllm-router=={pinned_version()}"
    marker = WHEELHOUSE / f".{requirement}"
    if marker.exists():
        return WHEELHOUSE
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    command = [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", *platforms]
    command += ["--python-version", NODE_PYTHON, "--implementation", "cp", "-d", str(WHEELHOUSE), requirement]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"pip download {requirement} for the router host failed:\n{done.stderr[-3000:]}"
    marker.touch()
    return WHEELHOUSE


# The router names its process vllm::router (setproctitle), whatever its argv was.
ROUTER_PROCESS = "vllm::router"
# One loop a second, bounded (6 h): (re)start when the unit appears, changes, or its process died. A router left by
# an earlier stand-in (a test run cut short) is stopped first: one owns the port.
SUPERVISOR = f"""
pkill -x '{ROUTER_PROCESS}'
unit={UNIT}; pid=""; stamp=""
for i in $(seq 21600); do
  if [ -f $unit ]; then
    now=$(stat -c %Y $unit)
    if [ -n "$pid" ] && {{ [ "$now" != "$stamp" ] || ! kill -0 $pid 2>/dev/null; }}; then
      kill $pid 2>/dev/null; wait $pid 2>/dev/null; pid=""
    fi
    if [ -z "$pid" ]; then
      stamp=$now
      env $(sed -n 's/^Environment=//p' $unit) $(sed -n 's/^ExecStart=//p' $unit) >>{STANDIN_LOG} 2>&1 &
      pid=$!
      $(sed -n 's/^ExecStartPost=//p' $unit) >>{STANDIN_LOG} 2>&1 &
    fi
  fi
  sleep 1
done
"""


def router_service_standin():
    """Start the systemd stand-in on the router host; returns the command that stops it and its router."""
    script = "/tmp/spark-serve-router-standin.sh"
    rc, out = node_exec(
        ROUTER_NODE,
        f"cat > {script} <<'EOF'\n{SUPERVISOR}\nEOF\nnohup sh {script} >/dev/null 2>&1 </dev/null & echo $!",
    )
    assert rc == 0, out
    return f"kill {out.strip()}; pkill -x '{ROUTER_PROCESS}'; true"
