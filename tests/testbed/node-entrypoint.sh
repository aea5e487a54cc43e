#!/bin/sh
# Test-bed node entrypoint: make the emulated-privileged container behave like a host, then run sshd
# (Ansible's way in) with dockerd as a sysvinit service (so `service docker restart` works as on a node).
# On every start after the first (`docker restart`, the test bed's reboot) it also does what a Spark's boot does with
# what the roles left behind: the CX-7 netdev is there under its name, netplan gives it the address and MTU of the
# roles' netplan file, the fabric firewall's and the door guard's boot units load their tables, and the services a
# role enabled start.
set -eu
mount -o remount,rw /sys 2>/dev/null || true
for ctrl in /sys/fs/cgroup/*; do
  [ -d "$ctrl" ] && mount -o remount,bind,rw "$ctrl" "$ctrl" 2>/dev/null || true
done
mkdir -p /root/.ssh /etc/docker /run/sshd
# Added, never rewritten: a reboot keeps the keys roles authorized (the watchdog's restart key on a worker).
touch /root/.ssh/authorized_keys
grep -qxF "$TESTBED_AUTHORIZED_KEY" /root/.ssh/authorized_keys ||
  printf '%s\n' "$TESTBED_AUTHORIZED_KEY" >> /root/.ssh/authorized_keys
chmod 700 /root/.ssh && chmod 600 /root/.ssh/authorized_keys
# First boot only: the daemon config a fresh node comes with; roles own it from then on.
[ -f /etc/docker/daemon.json ] || printf '%s\n' "$TESTBED_DAEMON_JSON" > /etc/docker/daemon.json
ssh-keygen -A >/dev/null

# The fast link: Docker reattaches the fabric network under a generic name with its own address. Only on a reboot:
# on the first start testbed.py's attach_fast_link attaches and names it while this script runs, and two renames
# racing would kill the node.
booted=/var/lib/spark-serve-testbed/booted
fast=""
[ ! -f "$booted" ] ||
  fast=$(ip -o -4 addr show | awk -v a="${TESTBED_FAST_ADDRESS:-none}/" 'index($4, a) == 1 { print $2; exit }')
if [ -n "$fast" ]; then
  ip link set "$fast" down
  [ "$fast" = "$TESTBED_FAST_NETDEV" ] || ip link set "$fast" name "$TESTBED_FAST_NETDEV"
  ip addr flush dev "$TESTBED_FAST_NETDEV"
  ip link set "$TESTBED_FAST_NETDEV" mtu 1500 up
  plan=/etc/netplan/40-spark-serve-roce.yaml  # roles/roce_network's file (netplan at boot on a Spark)
  if [ -f "$plan" ]; then
    address=$(sed -n 's|^ *- \([0-9.]*/[0-9]*\)$|\1|p' "$plan" | head -n 1)
    mtu=$(sed -n 's|^ *mtu: *\([0-9]*\)$|\1|p' "$plan" | head -n 1)
    [ -z "$mtu" ] || ip link set "$TESTBED_FAST_NETDEV" mtu "$mtu"
    [ -z "$address" ] || ip addr add "$address" dev "$TESTBED_FAST_NETDEV"
  fi
fi
# roles/fabric_firewall's boot unit (spark-serve-fabric-firewall.service), which runs before Docker.
rules=/etc/spark-serve/fabric-firewall.nft
[ ! -f "$rules" ] || nft -f "$rules"
# roles/front_door's boot unit (spark-serve-door-guard.service): only nginx and root reach vLLM's port on loopback.
guard=/etc/spark-serve/front-door-guard.nft
[ ! -f "$guard" ] || nft -f "$guard"
# Every sysvinit service enabled for runlevel 3 (docker; nginx once roles/front_door enabled it); sshd runs below.
for script in /etc/rc3.d/S*; do
  case "$script" in *ssh) continue ;; esac
  "$script" start >/dev/null || echo "testbed-entrypoint: $script did not start" >&2
done
mkdir -p "${booted%/*}" && touch "$booted"
exec /usr/sbin/sshd -D -e
