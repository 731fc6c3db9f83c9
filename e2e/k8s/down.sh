#!/usr/bin/env bash
# Tears down what up.sh set up and leaves the host as it was: the kubelet,
# the pods' tasks, the private containerd and its shims, the control plane,
# every mount under the run dir (deepest first), the bridge, libcni's cache
# entries, the sysctls the kubelet rewrote, the kubepods cgroups and the run
# dir. Docker's containerd is never touched. Safe to run when nothing is up,
# and again after a failed run. The binaries stay (build.sh's cache).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

[ "$(id -u)" = 0 ] || k8s_die "down.sh: run as root"
if [ ! -e "$run_dir" ]; then
	k8s_log "nothing is up ($run_dir is absent)"
	exit 0
fi

# stop PID...: SIGTERM, then SIGKILL after 10 s.
stop() {
	local pid i alive
	[ $# -gt 0 ] || return 0
	kill "$@" 2>/dev/null
	for ((i = 0; i < 40; i++)); do
		alive=0
		for pid in "$@"; do kill -0 "$pid" 2>/dev/null && alive=1; done
		[ $alive = 1 ] || return 0
		sleep 0.25
	done
	k8s_log "still running after 10 s, killed: $*"
	kill -9 "$@" 2>/dev/null
	sleep 0.25
}
stop_component() {
	local pid
	pid=$(k8s_pid "$1") && stop "$pid"
	rm -f "$run_dir/pids/$1.pid"
}
# kubepods_pids prints every process in the kubelet's cgroups.
kubepods_pids() { cat /sys/fs/cgroup/*/kubepods/cgroup.procs /sys/fs/cgroup/*/kubepods/**/cgroup.procs 2>/dev/null | sort -u; }
shopt -s globstar nullglob

stop_component kubelet
if k8s_pid containerd >/dev/null; then
	for id in $(ctr --address "$containerd_sock" -n k8s.io tasks ls -q 2>/dev/null); do
		ctr --address "$containerd_sock" -n k8s.io tasks kill -s SIGKILL "$id" >/dev/null 2>&1
	done
	sleep 0.5
	for id in $(ctr --address "$containerd_sock" -n k8s.io tasks ls -q 2>/dev/null); do
		ctr --address "$containerd_sock" -n k8s.io tasks delete --force "$id" >/dev/null 2>&1
	done
fi
# Whatever containerd did not clean up: runc's own state, then any process
# still in a pod cgroup.
if [ -d "$run_dir/runc/k8s.io" ]; then
	for id in $(runc --root "$run_dir/runc/k8s.io" list -q 2>/dev/null); do
		runc --root "$run_dir/runc/k8s.io" delete --force "$id" >/dev/null 2>&1
	done
fi
stop_component containerd
# Shims outlive containerd; ours are the ones started with our socket.
shims=()
for f in /proc/[0-9]*/cmdline; do
	if { tr '\0' ' ' <"$f"; } 2>/dev/null | grep -q -- "containerd-shim.* -address $containerd_sock "; then
		p=${f#/proc/}
		shims+=("${p%/cmdline}")
	fi
done
stop "${shims[@]}"
mapfile -t left < <(kubepods_pids)
[ ${#left[@]} = 0 ] || kill -9 "${left[@]}" 2>/dev/null
# The scheduler and controller-manager together, then the API server, then
# etcd: each stops promptly only while what it talks to still answers.
pids=()
for c in kube-scheduler kube-controller-manager; do
	pid=$(k8s_pid "$c") && pids+=("$pid")
	rm -f "$run_dir/pids/$c.pid"
done
stop "${pids[@]}"
stop_component kube-apiserver
stop_component etcd

# Mounts under the run dir, deepest first.
mounts() { awk -v p="$run_dir/" 'index($5, p) == 1 { print $5 }' /proc/self/mountinfo | sort -r -u; }
for m in $(mounts); do
	umount "$m" 2>/dev/null || umount -l "$m"
done

if ip link show "$bridge" >/dev/null 2>&1; then
	for veth in $(ip -o link show master "$bridge" | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }'); do
		ip link del "$veth" 2>/dev/null
	done
	ip link del "$bridge"
fi
# libcni's results of our pods: on our network, and on the loopback network
# that containerd's CRI adds to every pod sandbox of ours.
for r in /var/lib/cni/results/k8se2e-*-eth0; do
	id=${r#/var/lib/cni/results/k8se2e-}
	rm -f "$r" "/var/lib/cni/results/cni-loopback-${id%-eth0}-lo"
done

if [ -f "$run_dir/sysctls" ]; then
	while read -r key value; do
		[ "$(sysctl -n "$key")" = "$value" ] || sysctl -q -w "$key=$value"
	done <"$run_dir/sysctls"
fi

for d in /sys/fs/cgroup/*/kubepods; do
	find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
	[ ! -d "$d" ] || k8s_log "could not remove $d"
done

# Directories outside the run dir that up.sh found absent, if now empty.
if [ -f "$run_dir/created" ]; then
	while read -r d; do
		[ -d "$d" ] && find "$d" -depth -type d -empty -delete
	done <"$run_dir/created"
fi

if [ -n "$(mounts)" ]; then
	k8s_die "down.sh: still mounted under $run_dir: $(mounts | tr '\n' ' ')"
fi
rm -rf "$run_dir"
k8s_log "down: $run_dir removed"
