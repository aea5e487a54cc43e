"""roles/container_toolkit's decisions: the version the toolkit packages are to be at (the pin, or a newer one the
node has: never a downgrade) and, after the install, what is wrong with the packages dpkg has, the version nvidia-ctk
reports and the runtimes of the running Docker daemon. Pure: no Ansible imports;
roles/container_toolkit/library/container_toolkit_target.py and container_toolkit_check.py call these."""

import re

from ansible.module_utils.probe_results import command_error, output_lines

# What apt accepts as a package version: [epoch:]upstream[-revision], the upstream part starting with a digit.
DEBIAN_VERSION = re.compile(r"^(?:[0-9]+:)?[0-9][A-Za-z0-9.+~-]*(?<!-)$")
RUNS = re.compile(r"([^0-9]*)([0-9]*)")  # a non-digit run and the digit run after it (both may be empty)
# The end of a non-digit run in dpkg's order: after `~`, before every other character.
END = 0
# The run after a part's end: dpkg compares two parts as if each went on with empty runs.
EMPTY_RUN = ((END,), 0)


def char_order(char):
    """dpkg's order of one non-digit character: `~` first, then the end of the run, letters, everything else."""
    if char == "~":
        return -1
    if char.isascii() and char.isalpha():
        return ord(char)
    return ord(char) + 256


def part_key(part):
    """The sort key of an upstream version or a revision as dpkg compares them: alternating non-digit runs (by
    char_order, each closed by END) and digit runs (as numbers), closed by an empty run: "1.0~rc1" < "1.0" < "1.0a",
    and "0" == "" (1.0-0 is 1.0). Only the first run may have no text (a part starting with a digit): every later
    one differs from the closing empty run, which is what makes a shorter key compare as dpkg's padded part does."""
    first, *later = RUNS.findall(part)  # the last match is the empty one at the part's end
    runs = [first, *(run for run in later if run[0])]
    return (*((tuple(map(char_order, text)) + (END,), int(digits or 0)) for text, digits in runs), EMPTY_RUN)


def debian_version_key(version):
    """A key that sorts Debian package versions as `dpkg --compare-versions` does. Python here, because the module
    runs on the node with the interpreter Ansible found there, which may not import python3-apt's apt_pkg."""
    epoch, _, rest = version.partition(":") if ":" in version else ("0", "", version)
    upstream, hyphen, revision = rest.rpartition("-")
    if not hyphen:
        upstream, revision = rest, ""
    return int(epoch), part_key(upstream), part_key(revision)


def version_problem(field, version):
    """Why `version` cannot be a pin of the toolkit packages ("": it can)."""
    if DEBIAN_VERSION.match(version):
        return ""
    return (
        f"{field}={version!r}: not a Debian package version (rule: [epoch:]upstream[-revision], the upstream part "
        "starting with a digit, as apt installs it: e.g. 1.17.8-1)"
    )


def installed_versions(dpkg, packages):
    """{package: its installed version, or ""}."""
    return {package: installed_version(dpkg, package) for package in packages}


def target_version(pin, installed):
    """The version every toolkit package is to be at: the pin, or the newest one installed when that is newer. A DGX
    OS update may bring a newer toolkit than the pin, and what runs on the node already uses it: never downgraded."""
    return max([pin, *filter(None, installed.values())], key=debian_version_key)


def toolkit_target(p):
    """(version, kept, msg) of one node before the install; `p`: container_toolkit_target's parameters."""
    installed = installed_versions(p["dpkg"], p["packages"])
    version = target_version(p["version"], installed)
    kept = version != p["version"]
    moves = [f"{name} {found or 'not installed'} -> {version}" for name, found in installed.items() if found != version]
    why = f"newer than container_toolkit_version={p['version']}: kept, never downgraded" if kept else "the pin"
    return version, kept, f"{p['node']}: toolkit {version} ({why}): {', '.join(moves) or 'every package is at it'}"


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


def package_problems(installed, wanted):
    return [
        f"package {package} is {version or 'not installed'}, expected {wanted} (dpkg)"
        for package, version in installed.items()
        if version != wanted
    ]


def toolkit_verdict(p):
    """(problems, summary) of one node after the install; `p`: container_toolkit_check's parameters. The packages
    are to be at target_version: the pin, or the newer version the node had (kept)."""
    installed = installed_versions(p["dpkg"], p["packages"])
    wanted = target_version(p["version"], installed)
    upstream, found, daemon = upstream_version(wanted), ctk_version(p["ctk"]), daemon_state(p["docker_info"])
    problems = package_problems(installed, wanted)
    if found != upstream:
        problems.append(
            f"nvidia-ctk reports version {found or '(none)'}, expected {upstream} (nvidia-ctk --version: "
            f"{command_error(p['ctk'])})"
        )
    problems += daemon_problems(p, daemon)
    runtimes = ", ".join(daemon["Runtimes"])
    kept = f" (newer than the pin {p['version']}: kept)" if wanted != p["version"] else ""
    summary = f"{p['node']}: nvidia-ctk {found}{kept}, Docker runtimes {runtimes} (default {daemon['DefaultRuntime']})"
    return [f"{p['node']}: {problem}" for problem in problems], summary
