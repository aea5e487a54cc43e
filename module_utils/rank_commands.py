"""Every shell command the staged start (action_plugins/vllm_staged_start.py) sends to a node, built in one place
(pure; names quoted here). Each returns the command line; the action runs it with the task's become and a bound."""

import shlex


def compose(project, compose_dir):
    """The service's compose project on a node (docker compose -p ... --project-directory ...)."""
    return f"docker compose -p {shlex.quote(project)} --project-directory {shlex.quote(compose_dir)}"


def down(compose_prefix, grace_s):
    """Stop and remove the rank: compose sends SIGTERM, waits grace_s, then kills; never a bare SIGKILL first."""
    return f"{compose_prefix} down --timeout {int(grace_s)} --remove-orphans"


def up(compose_prefix):
    return f"{compose_prefix} up -d --no-recreate"


def remove_container(container):
    return f"docker rm -f {shlex.quote(container)} >/dev/null 2>&1"


def listeners(ports):
    """The sockets listening on `ports`, with their processes (ss)."""
    return " ; ".join(f"ss -ltnpH 'sport = :{int(port)}'" for port in ports)


def container_pids():
    """Every running container's name and the pids of its processes, a line each."""
    return (
        "for c in $(docker ps -q); do echo \"$(docker inspect -f '{{.Name}}' $c) "
        "$(docker top $c -eo pid | tail -n +2 | tr '\\n' ' ')\"; done"
    )


def meminfo():
    return "cat /proc/meminfo"


def wipe_cache(folder):
    """Empty vLLM's compile cache folder (the folder stays; a missing one is nothing to do)."""
    quoted = shlex.quote(folder)
    return f"[ ! -d {quoted} ] || find {quoted} -mindepth 1 -delete"


def df_pings(addresses, size):
    """Print each address that does not answer one ping of `size` bytes with Don't Fragment set."""
    targets = " ".join(shlex.quote(address) for address in addresses)
    return f"for a in {targets}; do ping -M do -s {int(size)} -c 1 -W 1 $a >/dev/null 2>&1 || echo $a; done"


def tcp_connect(address, port):
    """Open a TCP connection to address:port within 3 s (bash's /dev/tcp): rc 0 when it is accepted."""
    return f"timeout 3 bash -c 'exec 3<>/dev/tcp/{shlex.quote(address)}/{int(port)}' 2>&1"


def observe(container, health_port, netdev, tail):
    """One round trip: the container's state and exit code, the head's /health status (or -), the fast link's
    operstate and MTU (or -), the progress evidence line, then the last `tail` log lines."""
    probe = (
        f"curl -s -o /dev/null -m 5 -w '%{{http_code}}' http://127.0.0.1:{int(health_port)}/health"
        if health_port
        else "printf -"
    )
    sysfs = f"/sys/class/net/{shlex.quote(netdev)}" if netdev else None
    link = f"echo $(cat {sysfs}/operstate {sysfs}/mtu 2>/dev/null)" if sysfs else "echo -"
    return (
        f"docker inspect -f '{{{{.State.Status}}}} {{{{.State.ExitCode}}}}' {container} "
        f"2>/dev/null || echo missing -1; {probe}; echo; {link}; {evidence_command(container)}; "
        f"docker logs --tail {int(tail)} {container} 2>&1"
    )


def evidence(container, py_spy, log_mark, tail):
    """One round trip after a failure: every process's stacks (stacks_command), `log_mark`, the last log lines."""
    return (
        f"{stacks_command(container, shlex.quote(py_spy))}; echo {shlex.quote(log_mark)}; "
        f"docker logs --tail {int(tail)} {container} 2>&1"
    )


def evidence_command(container):
    """Shell that prints the container's progress evidence in one line: how many processes, the state letter of
    each, their CPU time (utime + stime, clock ticks) and the bytes they read and wrote (rchar + wchar, sockets and
    pipes included, plus read_bytes: pages a memory-mapped load fetched from storage), then each process apart, from
    /proc on the node."""
    return (
        f"for p in $(docker top {container} -eo pid 2>/dev/null | tail -n +2); do "
        "s=$(cut -d')' -f2- /proc/$p/stat 2>/dev/null) && "
        "echo \"$p $(tr ' ' '_' </proc/$p/comm 2>/dev/null) $s "
        "$(awk '/^(rchar|wchar|read_bytes):/{t+=$2} END{print t+0}' /proc/$p/io 2>/dev/null)\"; "
        'done | awk \'{st=st $3; cpu+=$14+$15; io+=$NF; n++; each=each " " $1 ":" $3 ":" $14+$15 ":" $NF '
        '":" $2} END{print n+0, (st=="" ? "-" : st), cpu+0, io+0 each}\''
    )


def stacks_command(container, py_spy, bound_s=5):
    """Shell that dumps the stacks of every process of the container with py-spy, all at once and each within
    bound_s, then prints them in pid order, each after a `=== pid` header naming its command line. --nonblocking
    reads a process without pausing it, so a stopped one can be read too."""
    return (
        "d=$(mktemp -d) && "
        f"for p in $(docker top {container} -eo pid 2>/dev/null | tail -n +2); do "
        "(echo \"=== pid $p: $(tr '\\0' ' ' </proc/$p/cmdline 2>/dev/null | cut -c1-160)\"; "
        f"timeout {int(bound_s)} {py_spy} dump --nonblocking --pid $p 2>&1) >$d/$p & done; wait; "
        'for f in $(ls $d | sort -n); do cat $d/$f; done; rm -rf "$d"'
    )
