# Shared settings of e2e/k8s/*.sh (sourced, not run). Every path and port of
# the single-node test cluster is decided here.
#
#   K8S_VERSION      Kubernetes release to build (default v1.37.2; its staging
#                    modules are v0.<minor>.<patch>)
#   SANDBOXD_CACHE   cache root (default /var/cache/sandboxd); the binaries
#                    and their Go caches live in $SANDBOXD_CACHE/k8s/<ver>-<go>
#   SANDBOXD_K8S_RUN run state of the cluster (default /var/lib/sandboxd-k8s);
#                    the env file is $SANDBOXD_K8S_RUN/env.sh
# shellcheck shell=bash disable=SC2034 # the variables are for the scripts that source this

K8S_VERSION=${K8S_VERSION:-v1.37.2}
k8s_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
k8s_repo=$(cd "$k8s_here/../.." && pwd)
go_version=$(go env GOVERSION 2>/dev/null || echo nogo)
build_dir=${SANDBOXD_CACHE:-/var/cache/sandboxd}/k8s/$K8S_VERSION-$go_version
bin_dir=$build_dir/bin
run_dir=${SANDBOXD_K8S_RUN:-/var/lib/sandboxd-k8s}
env_file=$run_dir/env.sh

# Everything listens on loopback only.
etcd_client_port=23790
etcd_peer_port=23800
apiserver_port=16443
kubelet_port=10250
bridge=k8se2e0
pod_cidr=10.88.0.0/16
service_cidr=10.96.0.0/16
node_name=localhost
# The kubelet rewrites these host-wide; up.sh saves them, down.sh restores them.
kubelet_sysctls=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes)
pause_image=localhost/pause:3.10-local
containerd_sock=$run_dir/containerd/containerd.sock

k8s_log() { printf '==> k8s: %s\n' "$*"; }
k8s_die() {
	printf 'e2e/k8s: %s\n' "$*" >&2
	exit 1
}

# k8s_pid NAME prints the pid of a component started by up.sh if it runs.
k8s_pid() {
	local f=$run_dir/pids/$1.pid pid
	[ -f "$f" ] || return 1
	pid=$(cat "$f")
	kill -0 "$pid" 2>/dev/null && echo "$pid"
}
