#!/bin/sh
# Test-bed node entrypoint: make the emulated-privileged container behave like a host, then run sshd
# (Ansible's way in) with dockerd as a sysvinit service (so `service docker restart` works as on a node).
set -eu
mount -o remount,rw /sys 2>/dev/null || true
for ctrl in /sys/fs/cgroup/*; do
  [ -d "$ctrl" ] && mount -o remount,bind,rw "$ctrl" "$ctrl" 2>/dev/null || true
done
mkdir -p /root/.ssh /etc/docker /run/sshd
printf '%s\n' "$TESTBED_AUTHORIZED_KEY" > /root/.ssh/authorized_keys
chmod 700 /root/.ssh && chmod 600 /root/.ssh/authorized_keys
# First boot only: the daemon config a fresh node comes with; roles own it from then on.
[ -f /etc/docker/daemon.json ] || printf '%s\n' "$TESTBED_DAEMON_JSON" > /etc/docker/daemon.json
ssh-keygen -A >/dev/null
service docker start >/dev/null
exec /usr/sbin/sshd -D -e
