#!/usr/bin/env bash
# Prints what of the host up.sh/down.sh may change, for a before/after diff
# (run as root):
#   e2e/k8s/hoststate.sh >before; up.sh; down.sh; e2e/k8s/hoststate.sh >after
#   diff before after
# Mount points, the sysctls the kubelet rewrites, links, iptables rules (no
# counters), cgroup directories two levels deep, libcni's cache and
# containerd's shim socket directory. Other users of a shared machine
# (containers coming and going) show up too.
set -uo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
echo "## mounts"
awk '{ print $5, $9 }' /proc/self/mountinfo | sort
echo "## sysctls"
for s in "${kubelet_sysctls[@]}"; do echo "$s = $(sysctl -n "$s")"; done
echo "## links"
ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' | sort
echo "## iptables"
for t in filter nat mangle raw; do
	iptables-save -t "$t" 2>/dev/null | grep -v '^[#:]' | sed 's/\[[0-9]*:[0-9]*\]//'
done
echo "## cgroups"
find /sys/fs/cgroup -mindepth 1 -maxdepth 2 -type d | sort
echo "## paths"
ls -d /var/lib/cni /var/lib/cni/* /run/containerd /run/containerd/* "$run_dir" 2>/dev/null
echo "## processes"
ps -eo comm= | grep -E '^(kube|etcd|containerd|runc)' | sort | uniq -c
