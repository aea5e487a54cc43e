"""What roles/nvidia_driver finds wrong after its install: the driver package dpkg has, and the driver and GPU that
nvidia-smi reports. Pure: no Ansible imports; roles/nvidia_driver/library/nvidia_driver_check.py calls these."""

from ansible.module_utils.preflight_checks import gpus
from ansible.module_utils.probe_results import command_error, output_lines

# A driver installed in this run is not loaded until the node reboots.
REBOOT_HINT = " - the driver package changed in this run: reboot the node to load it"


def installed_versions(dpkg):
    """The installed versions in `dpkg-query --showformat='${db:Status-Status} ${Version}\\n'` output."""
    return [line.split(" ")[-1] for line in output_lines(dpkg) if line.startswith("installed ")]


def package_problems(package, branch, version, installed):
    problems = [] if installed else [f"package {package} is not installed (dpkg)"]
    problems += [
        f"package {package} {found} is not on branch {branch} (dpkg)"
        for found in installed
        if not found.startswith(f"{branch}.")
    ]
    problems += [
        f"package {package} is {found}, expected {version} (dpkg)"
        for found in installed
        if version and found != version
    ]
    return problems


def running_problems(p, found):
    """What nvidia-smi says about the running driver and the GPU (`found`: its GPUs)."""
    hint = REBOOT_HINT if p["package_changed"] else ""
    smi, problems = p["smi"], []
    if smi.get("rc", 1) != 0 or not found:
        problems.append(f"nvidia-smi reports no GPU (rc {smi.get('rc', '?')}: {command_error(smi)}){hint}")
    for gpu in found:
        if not gpu["driver_version"].startswith(f"{p['branch']}."):
            problems.append(f"driver {gpu['driver_version']} is not on branch {p['branch']} (nvidia-smi){hint}")
        if gpu["name"] != p["expected_gpu"]:
            problems.append(f'GPU is "{gpu["name"]}", expected "{p["expected_gpu"]}" (nvidia-smi)')
    return problems


def driver_verdict(p):
    """(problems, summary) of one node; `p`: the module's parameters."""
    installed, found = installed_versions(p["dpkg"]), gpus(p["smi"])
    problems = package_problems(p["package"], p["branch"], p["version"], installed) + running_problems(p, found)
    running = "; ".join(f"{gpu['name']}, driver {gpu['driver_version']}" for gpu in found)
    summary = f"{p['node']}: {running} ({p['package']} {', '.join(installed)})"
    return [f"{p['node']}: {problem}" for problem in problems], summary
