#!/usr/bin/env bash
# Brings up a single-node Kubernetes cluster for the e2e tests, as root, on
# loopback only and without a registry (the recipe and its traps:
# ../shared/reference/kubernetes.md, summed up in e2e/k8s/README.md):
#   Debian packages if missing, the binaries (build.sh, cached), a PKI, etcd,
#   kube-apiserver, kube-controller-manager, kube-scheduler, a private
#   containerd (never Docker's), the kubelet, and the images (images.sh).
# It waits for the node to be Ready and for the default ServiceAccount and
# kube-root-ca.crt, runs one pod and an exec in it, and writes the env file
# $SANDBOXD_K8S_RUN/env.sh (default /var/lib/sandboxd-k8s/env.sh). Left-over
# state is torn down first (down.sh), and down.sh undoes all of this.
#
# Every step's time goes to $SANDBOXD_K8S_RUN/timings.txt.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

[ "$(id -u)" = 0 ] || k8s_die "up.sh: run as root"
start=$SECONDS
if [ -e "$run_dir" ]; then
	k8s_log "state left in $run_dir: tearing it down first"
	bash "$here/down.sh"
fi

# step NAME: records the time since the last step.
last=$SECONDS
step() {
	printf '%-28s %4ds\n' "$1" $((SECONDS - last)) >>"$run_dir/timings.txt"
	k8s_log "$1 ($((SECONDS - last))s)"
	last=$SECONDS
}

# --- Debian packages ---------------------------------------------------------
installed() { [ "$(dpkg-query -W -f '${Status}' "$1" 2>/dev/null)" = "install ok installed" ]; }
missing=()
for p in containerd runc containernetworking-plugins openssl curl; do
	installed "$p" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	k8s_log "installing ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get update -q
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
bash "$here/build.sh"

mkdir -p "$run_dir"/{pids,logs,pki,etcd,kubelet,pods-logs,cni/net.d,cni/ipam,containerd}
: >"$run_dir/timings.txt"
step "packages and build"

# Things outside the run dir that this run creates; down.sh removes them.
for d in /var/lib/cni /run/containerd; do
	[ -e "$d" ] || echo "$d" >>"$run_dir/created"
done
for s in "${kubelet_sysctls[@]}"; do
	echo "$s $(sysctl -n "$s")" >>"$run_dir/sysctls"
done

# --- PKI -----------------------------------------------------------------------
pki=$run_dir/pki
# cert NAME CA SUBJECT [SAN]: a key and a certificate signed by CA.
cert() {
	local name=$1 ca=$2 subj=$3 san=${4:-}
	openssl genrsa -out "$pki/$name.key" 2048 2>/dev/null
	openssl req -new -key "$pki/$name.key" -subj "$subj" -out "$pki/$name.csr" 2>/dev/null
	if [ -n "$san" ]; then printf 'subjectAltName=%s\n' "$san" >"$pki/$name.ext"; else : >"$pki/$name.ext"; fi
	openssl x509 -req -in "$pki/$name.csr" -CA "$pki/$ca.crt" -CAkey "$pki/$ca.key" -CAcreateserial \
		-days 30 -extfile "$pki/$name.ext" -out "$pki/$name.crt" 2>/dev/null
}
for ca in ca front-proxy-ca; do
	openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=k8se2e-$ca" \
		-keyout "$pki/$ca.key" -out "$pki/$ca.crt" 2>/dev/null
done
cert apiserver ca /CN=kube-apiserver \
	"IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
cert apiserver-kubelet-client ca "/O=system:masters/CN=kube-apiserver-kubelet-client"
cert kubelet ca /CN=localhost "IP:127.0.0.1,DNS:localhost"
cert front-proxy-client front-proxy-ca /CN=front-proxy-client
openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
# Static tokens, one per client, each with its own kubeconfig.
: >"$pki/tokens.csv"
kubeconfig() {
	local name=$1 user=$2 groups=$3 token
	token=$(openssl rand -hex 24)
	echo "$token,$user,$user,\"$groups\"" >>"$pki/tokens.csv"
	cat >"$run_dir/$name.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: k8se2e
  cluster:
    server: https://127.0.0.1:$apiserver_port
    certificate-authority: $pki/ca.crt
users:
- name: $user
  user:
    token: $token
contexts:
- name: k8se2e
  context: {cluster: k8se2e, user: $user}
current-context: k8se2e
KC
	chmod 600 "$run_dir/$name.kubeconfig"
}
kubeconfig admin admin system:masters
kubeconfig kubelet "system:node:$node_name" system:nodes
kubeconfig controller-manager system:kube-controller-manager ""
kubeconfig scheduler system:kube-scheduler ""
step "PKI"

# --- control plane -------------------------------------------------------------
# launch NAME CMD...: runs CMD in its own session, logging to logs/NAME.log.
launch() {
	local name=$1
	shift
	setsid "$@" >"$run_dir/logs/$name.log" 2>&1 </dev/null &
	echo $! >"$run_dir/pids/$name.pid"
}
# wait_for NAME SECONDS CMD...: waits until CMD succeeds while NAME runs.
wait_for() {
	local name=$1 secs=$2 i
	shift 2
	for ((i = 0; i < secs * 4; i++)); do
		"$@" >/dev/null 2>&1 && return 0
		if ! k8s_pid "$name" >/dev/null; then
			tail -n 30 "$run_dir/logs/$name.log" >&2
			k8s_die "$name exited (log: $run_dir/logs/$name.log)"
		fi
		sleep 0.25
	done
	tail -n 30 "$run_dir/logs/$name.log" >&2
	k8s_die "$name: not ready after ${secs}s (log: $run_dir/logs/$name.log)"
}
healthy() { curl -sfk --max-time 2 "$1" | grep -qx ok; }
export KUBECONFIG=$run_dir/admin.kubeconfig KUBECACHEDIR=$run_dir/kubecache
kubectl() { "$bin_dir/kubectl" "$@"; }

launch etcd "$bin_dir/etcd" --name k8se2e --data-dir "$run_dir/etcd" \
	--listen-client-urls "http://127.0.0.1:$etcd_client_port" \
	--advertise-client-urls "http://127.0.0.1:$etcd_client_port" \
	--listen-peer-urls "http://127.0.0.1:$etcd_peer_port" \
	--initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
	--initial-cluster "k8se2e=http://127.0.0.1:$etcd_peer_port"
wait_for etcd 60 curl -sf --max-time 2 "http://127.0.0.1:$etcd_client_port/health"
step "etcd"

launch kube-apiserver "$bin_dir/kube-apiserver" \
	--etcd-servers "http://127.0.0.1:$etcd_client_port" \
	--bind-address 127.0.0.1 --secure-port "$apiserver_port" --cert-dir "$run_dir/apiserver" \
	--tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
	--client-ca-file "$pki/ca.crt" --token-auth-file "$pki/tokens.csv" \
	--authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
	--service-account-issuer https://kubernetes.default.svc.cluster.local \
	--service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
	--service-cluster-ip-range "$service_cidr" \
	--kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" \
	--kubelet-client-key "$pki/apiserver-kubelet-client.key" \
	--kubelet-certificate-authority "$pki/ca.crt" \
	--kubelet-preferred-address-types Hostname \
	--requestheader-client-ca-file "$pki/front-proxy-ca.crt" \
	--requestheader-allowed-names front-proxy-client \
	--requestheader-extra-headers-prefix X-Remote-Extra- \
	--requestheader-group-headers X-Remote-Group --requestheader-username-headers X-Remote-User \
	--proxy-client-cert-file "$pki/front-proxy-client.crt" \
	--proxy-client-key-file "$pki/front-proxy-client.key"
wait_for kube-apiserver 120 kubectl get --raw /readyz
step "kube-apiserver"

launch kube-controller-manager "$bin_dir/kube-controller-manager" \
	--kubeconfig "$run_dir/controller-manager.kubeconfig" \
	--authentication-kubeconfig "$run_dir/controller-manager.kubeconfig" \
	--authorization-kubeconfig "$run_dir/controller-manager.kubeconfig" \
	--bind-address 127.0.0.1 --secure-port 10257 --cert-dir "$run_dir/kcm" --leader-elect=false \
	--use-service-account-credentials --service-account-private-key-file "$pki/sa.key" \
	--root-ca-file "$pki/ca.crt" --service-cluster-ip-range "$service_cidr"
launch kube-scheduler "$bin_dir/kube-scheduler" \
	--kubeconfig "$run_dir/scheduler.kubeconfig" \
	--authentication-kubeconfig "$run_dir/scheduler.kubeconfig" \
	--authorization-kubeconfig "$run_dir/scheduler.kubeconfig" \
	--bind-address 127.0.0.1 --secure-port 10259 --leader-elect=false
wait_for kube-controller-manager 60 healthy https://127.0.0.1:10257/healthz
wait_for kube-scheduler 60 healthy https://127.0.0.1:10259/healthz
step "controller-manager, scheduler"

# --- containerd ------------------------------------------------------------------
# A private instance: its own root, state, socket, runc root and CNI config.
# restrict_oom_score_adj: root here may lack CAP_SYS_RESOURCE, so runc cannot
# lower a sandbox's oom_score_adj below containerd's own.
ctrd=$run_dir/containerd
cat >"$ctrd/config.toml" <<TOML
version = 2
root = "$ctrd/root"
state = "$ctrd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "$containerd_sock"
[ttrpc]
  address = "$ctrd/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$ctrd/opt"
[plugins."io.containerd.runtime.v1.linux"]
  runtime_root = "$run_dir/runc-v1"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause_image"
  restrict_oom_score_adj = true
  disable_apparmor = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$run_dir/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$run_dir/cni/net.d"
TOML
# No masquerading and no portmap: the set-up adds no iptables rule.
cat >"$run_dir/cni/net.d/10-k8se2e.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "k8se2e",
  "plugins": [
    {
      "type": "bridge", "bridge": "$bridge", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {"type": "host-local", "ranges": [[{"subnet": "$pod_cidr"}]], "dataDir": "$run_dir/cni/ipam"}
    },
    {"type": "loopback"}
  ]
}
JSON
launch containerd containerd --config "$ctrd/config.toml"
wait_for containerd 30 ctr --address "$containerd_sock" version
step "containerd"
bash "$here/images.sh" pause
step "pause image"

# --- kubelet -----------------------------------------------------------------------
cat >"$run_dir/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $kubelet_port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: $pki/kubelet.crt
tlsPrivateKeyFile: $pki/kubelet.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$containerd_sock
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
podLogsDir: $run_dir/pods-logs
resolvConf: /etc/resolv.conf
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, nodefs.inodesFree: 1%, imagefs.available: 1%}
makeIPTablesUtilChains: false
YAML
launch kubelet "$bin_dir/kubelet" --config "$run_dir/kubelet.yaml" \
	--kubeconfig "$run_dir/kubelet.kubeconfig" --root-dir "$run_dir/kubelet" \
	--cert-dir "$run_dir/kubelet/pki" --hostname-override "$node_name"
node_ready() {
	[ "$(kubectl get node "$node_name" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = True ]
}
wait_for kubelet 120 node_ready
step "kubelet, node Ready"
wait_for kube-controller-manager 120 kubectl -n default get serviceaccount default
wait_for kube-controller-manager 120 kubectl -n default get configmap kube-root-ca.crt
step "default SA, kube-root-ca.crt"

cat >"$env_file" <<ENV
# The e2e test cluster (e2e/k8s/up.sh); source it, or pass it to the tests.
export KUBECONFIG=$run_dir/admin.kubeconfig
export SANDBOXD_E2E_KUBECONFIG=$run_dir/admin.kubeconfig
export KUBECACHEDIR=$run_dir/kubecache
export PATH=$bin_dir:\$PATH
export CONTAINERD_ADDRESS=$containerd_sock
export CONTAINERD_NAMESPACE=k8s.io
export SANDBOXD_K8S_RUN=$run_dir
# The sandboxd image that images.sh built from this tree (up.sh runs it).
export SANDBOXD_E2E_K8S_AGENT_IMAGE=localhost/sandboxd:e2e
ENV
if [ "${SANDBOXD_K8S_IMAGES:-}" != none ]; then
	# shellcheck disable=SC2086 # a list of names
	bash "$here/images.sh" ${SANDBOXD_K8S_IMAGES:-}
	step "images"
fi

# --- a pod and an exec in it -------------------------------------------------------
# With busybox imported (the default), the pod runs a shell and takes an exec.
smoke=(--image "$pause_image")
if ctr --address "$containerd_sock" -n k8s.io images ls -q | grep -qx docker.io/sandboxd-test/busybox:latest; then
	smoke=(--image sandboxd-test/busybox:latest -- sleep 600)
fi
kubectl -n default run k8se2e-smoke --image-pull-policy Never --restart Never \
	--overrides '{"spec":{"automountServiceAccountToken":false,"terminationGracePeriodSeconds":0}}' "${smoke[@]}" >/dev/null
kubectl -n default wait --for condition=Ready --timeout 120s pod/k8se2e-smoke >/dev/null
if [ ${#smoke[@]} -gt 2 ]; then
	[ "$(kubectl -n default exec k8se2e-smoke -- echo ok)" = ok ] || k8s_die "exec in the smoke pod failed"
fi
kubectl -n default delete pod k8se2e-smoke --wait=true --timeout 120s >/dev/null
step "smoke pod"
k8s_log "cluster up in $((SECONDS - start))s; env file: $env_file"
