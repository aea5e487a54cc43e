"""What roles/container_toolkit finds wrong after its install: the toolkit packages dpkg has, the version nvidia-ctk
reports and the runtimes of the running Docker daemon. Pure: no Ansible imports;
roles/container_toolkit/library/container_toolkit_check.py calls these."""

import re

from ansible.module_utils.probe_results import command_error, output_lines


def upstream_version(version):
    """The version nvidia-ctk prints for a Debian package version: 1.17.8-1 -> 1.17.8, 1.18.0~rc.1-1 -> 1.18.0-rc.1."""
    return re.sub(r"-[^-]+$", "", version).replace("~", "-")


def installed_version(dpkg, package):
    """The package's installed version in `dpkg-query --showformat='${Package} ${db:Status-Status} ${Version}\\n'`
    output, or ""."""
    lines = [line for line in output_lines(dpkg) if line.startswith(f"{package} installed ")]
    return lines[0].split(" ")[-1] if lines else ""


def ctk_version(ctk):
    match = re.search(r"version (\S+)", str(ctk.get("stdout", "")))
    return match.group(1) if match else ""


def daemon_state(docker_info):
    """docker info's host_info, or no runtimes when the daemon did not answer."""
    return docker_info.get("host_info") or {"Runtimes": {}, "DefaultRuntime": ""}


def daemon_problems(p, daemon):
    runtime, problems = p["runtime_name"], []
    if p["docker_info"].get("failed"):
        problems.append(f"docker info failed: {str(p['docker_info'].get('msg', '')).strip()}")
    elif runtime not in daemon["Runtimes"]:
        runtimes = ", ".join(daemon["Runtimes"])
        problems.append(f"the running Docker daemon has no {runtime} runtime (runtimes: {runtimes}) (docker info)")
    if p["default_runtime"] and daemon["DefaultRuntime"] != runtime:
        problems.append(f"Docker default runtime is {daemon['DefaultRuntime']}, expected {runtime} (docker info)")
    return problems


def toolkit_verdict(p):
    """(problems, summary) of one node; `p`: the module's parameters."""
    wanted, found, daemon = p["version"], ctk_version(p["ctk"]), daemon_state(p["docker_info"])
    upstream = upstream_version(wanted)
    problems = []
    for package in p["packages"]:
        version = installed_version(p["dpkg"], package)
        if version != wanted:
            problems.append(f"package {package} is {version or 'not installed'}, expected {wanted} (dpkg)")
    if found != upstream:
        problems.append(
            f"nvidia-ctk reports version {found or '(none)'}, expected {upstream} (nvidia-ctk --version: "
            f"{command_error(p['ctk'])})"
        )
    problems += daemon_problems(p, daemon)
    runtimes = ", ".join(daemon["Runtimes"])
    summary = f"{p['node']}: nvidia-ctk {found}, Docker runtimes {runtimes} (default {daemon['DefaultRuntime']})"
    return [f"{p['node']}: {problem}" for problem in problems], summary
