"""What roles/spark_preflight finds wrong, from what its read-only probes registered: a node's facts (node_facts)
and problems (node_problems), then every node's problems plus what differs between the nodes (report_problems) and
one summary line per node (summary). Pure: no Ansible imports; roles/spark_preflight/library/spark_preflight_check.py
calls these.

Every problem is one line: "<node>: <fact> <found>, expected <value> (<where it was read>)".
"""

import re

from ansible.module_utils.probe_results import command_error, output_lines, slurped

KIB_PER_GIB = 1048576
BYTES_PER_GIB = 1073741824
REMOVE_IPC_OFF = ("no", "false", "off", "0")
UNCHECKED = "not checked (unreachable or failed before the preflight ran)"
# Facts every node must share: (fact, label, where it was read).
COMPARED = (
    ("kernel", "kernel", "/proc/sys/kernel/osrelease"),
    ("driver_version", "driver version", "nvidia-smi"),
    ("nic_layout", "NIC layout", "ibdev2netdev"),
)


def gpus(smi):
    """One {name, driver_version} per line of `nvidia-smi --query-gpu=name,driver_version --format=csv,noheader`."""
    fields = [line.split(", ") for line in output_lines(smi) if ", " in line]
    return [{"name": name, "driver_version": version} for name, version, *_ in fields]


def memory_gib(meminfo):
    match = re.search(r"MemTotal:\s+([0-9]+) kB", meminfo)
    return round(int(match.group(1) if match else 0) / KIB_PER_GIB, 1)


def disk(df):
    """(mount, free GiB) of df's last line of numbers: the deepest existing directory of the model cache path."""
    lines = [line for line in output_lines(df) if re.match(r"\s*[0-9]+\s", line)]
    fields = lines[-1].strip().split(None, 1) if lines else []
    return (fields + ["", ""])[1], round(int((fields + ["0"])[0]) / BYTES_PER_GIB, 1)


def logind_order(paths, conf, dirs):
    """The logind files in the order systemd reads them: the main file, then the drop-ins by file name; of two
    drop-ins with one name only the one in the earlier (higher-precedence) directory counts."""
    by_name = {}
    for directory in reversed(dirs):
        for path in paths:
            if re.fullmatch(re.escape(directory) + "/[^/]+", path):
                by_name[path.rsplit("/", 1)[1]] = path
    return [conf] + [by_name[name] for name in sorted(by_name, key=str.lower)]


def remove_ipc(logind, conf, dirs):
    """(value, file) of the last RemoveIPC= line of the logind files that count; systemd's default."""
    value, source, texts = "yes", "systemd default", slurped(logind)
    for path in logind_order(list(texts), conf, dirs):
        for line in texts.get(path, "").splitlines():
            if re.match(r"\s*RemoveIPC\s*=", line):
                value, source = line.split("=", 1)[1].strip(), path
    return value, source


def clock_offset(date, before, after):
    """Seconds the node clock lies outside [before, after] on the controller (+ ahead, - behind); None when the
    clock could not be read."""
    text = str(date.get("stdout", "")).strip()
    if not re.match(r"[0-9]+(\.[0-9]+)?$", text):
        return None
    node = float(text)
    return round(max(node - float(after), 0) + min(node - float(before), 0), 3)


def foreign_listeners(listeners, engine, cgroups):
    """ "<process> pid <N>" of every listener on the service port outside our engine containers (a container's id is
    in its processes' cgroup); the raw ss lines when ss names no process."""
    containers = output_lines(engine)
    ours = [pid for pid, text in slurped(cgroups).items() if any(container in text for container in containers)]
    found = re.findall(r'\("([^"]+)",pid=([0-9]+)', str(listeners.get("stdout", "")))
    named = list(dict.fromkeys(f"{name} pid {pid}" for name, pid in found if pid not in ours))
    return named or ([] if found else output_lines(listeners))


def nic_layout(ibdev):
    """ibdev2netdev's lines without the link state ("rocep1s0f1 port 1 ==> enp1s0f1np1"), sorted ignoring case."""
    lines = (re.sub(r"\s*\((Up|Down)\)\s*$", "", line).strip() for line in output_lines(ibdev))
    return sorted((line for line in lines if line), key=str.lower)


def command_failure(result, skipped_rc):
    """What a command said when it failed, "" when it succeeded (a skipped one counts as `skipped_rc`)."""
    return "" if result.get("rc", skipped_rc) == 0 else command_error(result)


def node_facts(p):
    """spark_preflight_facts from the probes (the module's parameters)."""
    proc = slurped(p["proc"])
    smi_gpus = gpus(p["smi"])
    mount, free_gib = disk(p["df"])
    settings = p["settings"]
    ipc, ipc_source = remove_ipc(p["logind"], settings["logind_conf"], settings["logind_dropin_dirs"])
    return {
        "architecture": p["architecture"],
        "kernel": proc.get("/proc/sys/kernel/osrelease", "").strip(),
        "gpus": smi_gpus,
        "driver_version": smi_gpus[0]["driver_version"] if smi_gpus else "",
        "smi_error": command_failure(p["smi"], 1),
        "memory_gib": memory_gib(proc.get("/proc/meminfo", "")),
        "model_cache_path": settings["model_cache_path"],
        "model_cache_mount": mount,
        "model_cache_free_gib": free_gib,
        "remove_ipc": ipc,
        "remove_ipc_source": ipc_source,
        "clock_offset_s": clock_offset(p["date"], p["controller_before"], p["controller_after"]),
        "port_listeners": foreign_listeners(p["listeners"], p["engine"], p["listener_cgroups"]),
        "roce_netdev_present": bool(p["netdev"].get("stat", {}).get("exists", False)),
        "nic_layout": nic_layout(p["ibdev"]),
        "ibdev2netdev_error": command_failure(p["ibdev"], 0),
    }


def gpu_problems(f, s):
    if not s["check_gpu"]:
        return []
    problems = []
    if not f["gpus"]:
        problems.append(
            f"no GPU reported ({s['smi_command']}: {f['smi_error'] or 'no output'}), expected {s['gpu_name']} on "
            f"driver branch {s['driver_branch']} (nvidia-smi)"
        )
    for gpu in f["gpus"]:
        if gpu["name"] != s["gpu_name"]:
            problems.append(f'GPU is "{gpu["name"]}", expected "{s["gpu_name"]}" (nvidia-smi)')
        if gpu["driver_version"].split(".")[0] != s["driver_branch"]:
            problems.append(f"driver {gpu['driver_version']} is not on branch {s['driver_branch']} (nvidia-smi)")
    return problems


def size_problems(f, s, df):
    problems = []
    least = s["min_memory_gib"]
    if least > 0 and f["memory_gib"] < least:
        problems.append(f"memory {f['memory_gib']} GiB, expected at least {least} GiB (/proc/meminfo MemTotal)")
    least, path = s["min_free_disk_gib"], f["model_cache_path"]
    if least > 0 and not f["model_cache_mount"]:
        problems.append(f"free disk for {path} could not be measured (df: {str(df.get('stderr', '')).strip()})")
    elif least > 0 and f["model_cache_free_gib"] < least:
        problems.append(
            f"{f['model_cache_free_gib']} GiB free on {f['model_cache_mount']} for {path}, expected at least "
            f"{least} GiB (df)"
        )
    return problems


def clock_problems(f, s, date):
    offset = f["clock_offset_s"]
    if not s["check_clock"]:
        return []
    if offset is None:
        return [f"clock could not be read (date: {command_error(date)})"]
    if abs(offset) > s["max_clock_offset_s"]:
        side = "ahead of" if offset > 0 else "behind"
        return [f"clock is {abs(float(offset))} s {side} the controller, allowed {s['max_clock_offset_s']} s (date)"]
    return []


def remove_ipc_problems(f, s):
    """logind's RemoveIPC=yes deletes the engine's shared memory when its user logs out."""
    if not s["check_remove_ipc"] or f["remove_ipc"].lower() in REMOVE_IPC_OFF:
        return []
    return [
        f"logind RemoveIPC={f['remove_ipc']} ({f['remove_ipc_source']}), expected no: set RemoveIPC=no under "
        f"[Login] in a .conf file in {s['logind_dropin_dirs'][0]} (logind.conf)"
    ]


def port_problems(f, s):
    if not s["check_port"] or not f["port_listeners"]:
        return []
    return [
        f"port {s['service_port']} is already in use by {', '.join(f['port_listeners'])}, not by the "
        f"{s['engine_project']} engine (ss -ltnp)"
    ]


def nic_problems(f, s):
    if not s["check_nic"]:
        return []
    netdev = s["roce_netdev"]
    problems = [] if f["roce_netdev_present"] else [f"RoCE netdev {netdev} is missing (/sys/class/net)"]
    if f["ibdev2netdev_error"]:
        problems.append(f"NIC layout unknown: {s['ibdev2netdev_command']}: {f['ibdev2netdev_error']} (ibdev2netdev)")
    elif not any(line.endswith(f"==> {netdev}") for line in f["nic_layout"]):
        problems.append(
            f"no RDMA device is mapped to {netdev} (ibdev2netdev: {'; '.join(f['nic_layout']) or 'no devices'})"
        )
    return problems


def node_problems(node, f, p):
    """Every problem of one node, in a fixed order, then the memory guard's line (which names the node itself)."""
    s = p["settings"]
    problems = []
    if f["architecture"] != s["architecture"]:
        problems.append(f"architecture {f['architecture']}, expected {s['architecture']} (uname -m)")
    problems += gpu_problems(f, s) + size_problems(f, s, p["df"]) + remove_ipc_problems(f, s)
    problems += clock_problems(f, s, p["date"]) + port_problems(f, s) + nic_problems(f, s)
    return [f"{node}: {problem}" for problem in problems] + ([p["memory_problem"]] if p["memory_problem"] else [])


def as_text(value):
    return value if isinstance(value, str) else "; ".join(value)


def differences(checked, facts):
    """A line per compared fact whose values differ between the nodes (ignoring case)."""
    lines = []
    for fact, label, source in COMPARED:
        values = [as_text(facts[host][fact]) for host in checked]
        if len({value.lower() for value in values}) > 1:
            pairs = ", ".join(f"{host} {value or '(none)'}" for host, value in zip(checked, values, strict=True))
            lines.append(f"{', '.join(checked)}: {label} differs between the nodes: {pairs} ({source})")
    return lines


def report_problems(hosts, facts, problems, compare):
    """Every node's problems in play order (a node without facts was not checked), then the differences."""
    found = []
    for host in hosts:
        found += problems[host] if host in facts else [f"{host}: {UNCHECKED}"]
    checked = [host for host in hosts if host in facts]
    return found + (differences(checked, facts) if compare and len(checked) > 1 else [])


def summary(hosts, facts):
    """One line per checked node: what the preflight found."""
    lines = []
    for host in (host for host in hosts if host in facts):
        f = facts[host]
        names = "+".join(gpu["name"] for gpu in f["gpus"]) or "no GPU"
        lines.append(
            f"{host}: {f['architecture']}, kernel {f['kernel']}, {names} driver {f['driver_version'] or '-'}, "
            f"{f['memory_gib']} GiB, {f['model_cache_free_gib']} GiB free, clock {f['clock_offset_s']} s"
        )
    return lines
