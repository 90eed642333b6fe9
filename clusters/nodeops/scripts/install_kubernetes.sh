#!/usr/bin/env bash
# install_kubernetes: containerd + kubelet/kubeadm/kubectl on every node; node-0 runs the
# control plane (kubeadm init, schedulable for GPU pods), workers kubeadm join it over
# the private network; flannel on wg0 and the NVIDIA device plugin make
# nvidia.com/gpu allocatable. Run on the head first, then workers. vm / bare_metal only.
set -euo pipefail

K8S_MINOR="${RUNCRATE_K8S_MINOR:-v1.30}"
GPUS="${RUNCRATE_GPUS_PER_NODE:?}"
HEAD_IP="${RUNCRATE_HEAD_IP:?}"
step "check"
check_install_fault kubernetes
[ "${RUNCRATE_MACHINE_KIND:?}" != container ] || die "Kubernetes runs only on vm and bare_metal machines"

step "config"
write_file "$ROOT/etc/runcrate/kubernetes.env" 0600 <<ENV
KUBE_API=$HEAD_IP:6443
KUBE_NODE_NAME=$NODE_NAME
KUBE_NODE_IP=$RUNCRATE_PRIVATE_IP
KUBE_GPUS=$GPUS
ENV

TOKEN="${RUNCRATE_KUBE_TOKEN:?RUNCRATE_KUBE_TOKEN is not set}"
CA_HASH="${RUNCRATE_KUBE_CA_HASH:?RUNCRATE_KUBE_CA_HASH is not set}"

# ca_hash FILE: what kubeadm pins, sha256 of the certificate's public key (DER SPKI).
ca_hash() {
    printf 'sha256:%s' "$(openssl x509 -pubkey -noout -in "$1" | openssl pkey -pubin -outform der | sha256sum | cut -d' ' -f1)"
}

# install_ca: the control plane made the cluster CA; kubeadm init uses one it finds here.
install_ca() {
    mkdir -p /etc/kubernetes/pki
    [ -f /etc/kubernetes/pki/ca.crt ] || write_file /etc/kubernetes/pki/ca.crt 0644 <<<"${RUNCRATE_KUBE_CA_CERT:?}"
    [ -f /etc/kubernetes/pki/ca.key ] || write_file /etc/kubernetes/pki/ca.key 0600 <<<"${RUNCRATE_KUBE_CA_KEY:?}"
    [ "$(ca_hash /etc/kubernetes/pki/ca.crt)" = "$CA_HASH" ] || die "the cluster CA on $NODE_NAME is not the one the control plane made"
}

STANDIN=0
if [ "${RUNCRATE_KUBELET_STANDIN:-0}" = 1 ] && ! is_sandbox; then
    # Real nodes that no kubelet package can reach (real nodes on one computer): the CA,
    # the token and the pin are real; the kubelet's registration with the API server is
    # the stand-in, kept in /shared on the head (docs/nodeops.md).
    STANDIN=1
    export SIM_REGISTRY=/shared/.runcrate-kubernetes/nodes SIM_TOOL_DIR="$STATE_DIR/bin"
    published=/shared/.runcrate-kubernetes
    step "control-plane-standin"
    if is_head; then
        install_ca
        mkdir -p "$published"
        cp /etc/kubernetes/pki/ca.crt "$published/ca.crt"
        # The bootstrap token, renewed for two hours whenever workers are about to join.
        printf '%s %s\n' "$TOKEN" "$(($(date +%s) + 7200))" | write_file "$published/token" 0600
    else
        is_reconfigure && exit 0
        # As `kubeadm join` does: fetch the cluster's CA and refuse one whose key is not pinned.
        [ "$(ca_hash "$published/ca.crt")" = "$CA_HASH" ] || die "the API server's CA does not match the pinned hash $CA_HASH"
        read -r published_token expires <"$published/token" || die "no bootstrap token published"
        [ "$published_token" = "$TOKEN" ] || die "the bootstrap token was not accepted"
        [ "$(date +%s)" -lt "$expires" ] || die "the bootstrap token has expired"
        mkdir -p /etc/kubernetes/pki
        cp "$published/ca.crt" /etc/kubernetes/pki/ca.crt
    fi
fi

if is_sandbox || [ "$STANDIN" = 1 ]; then
    step "sandbox-daemons"
    sim_tool kubectl kubernetes <<'FAKE'
nodes_json() {
    local first=1 name index address gpus role now
    now="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    printf '{\n    "apiVersion": "v1",\n    "items": ['
    for entry in $(find "$REGISTRY" -type f -printf '%f\n' 2>/dev/null | sort -t- -k2 -n); do
        read -r index address gpus <"$REGISTRY/$entry"
        name="$entry"
        role=""
        [ "$index" = 0 ] && role=', "node-role.kubernetes.io/control-plane": ""'
        [ "$first" = 1 ] || printf ','
        first=0
        cat <<JSON

        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": "$name",
                "labels": {"kubernetes.io/hostname": "$name", "kubernetes.io/os": "linux"$role}
            },
            "spec": {"podCIDR": "10.244.$index.0/24"},
            "status": {
                "addresses": [
                    {"address": "$address", "type": "InternalIP"},
                    {"address": "$name", "type": "Hostname"}
                ],
                "allocatable": {"cpu": "32", "ephemeral-storage": "950000000000", "memory": "263000000Ki", "nvidia.com/gpu": "$gpus", "pods": "110"},
                "capacity": {"cpu": "32", "ephemeral-storage": "1000000000000", "memory": "264000000Ki", "nvidia.com/gpu": "$gpus", "pods": "110"},
                "conditions": [
                    {"lastHeartbeatTime": "$now", "lastTransitionTime": "$now", "message": "kubelet has sufficient memory available", "reason": "KubeletHasSufficientMemory", "status": "False", "type": "MemoryPressure"},
                    {"lastHeartbeatTime": "$now", "lastTransitionTime": "$now", "message": "kubelet has no disk pressure", "reason": "KubeletHasNoDiskPressure", "status": "False", "type": "DiskPressure"},
                    {"lastHeartbeatTime": "$now", "lastTransitionTime": "$now", "message": "kubelet is posting ready status", "reason": "KubeletReady", "status": "True", "type": "Ready"}
                ],
                "nodeInfo": {"architecture": "amd64", "containerRuntimeVersion": "containerd://1.7.20", "kubeletVersion": "v1.30.4", "operatingSystem": "linux"}
            }
        }
JSON
    done
    printf '\n    ],\n    "kind": "List",\n    "metadata": {"resourceVersion": ""}\n}\n'
}
nodes_table() {
    printf '%-10s %-7s %-14s %-5s %s\n' NAME STATUS ROLES AGE VERSION
    for entry in $(find "$REGISTRY" -type f -printf '%f\n' 2>/dev/null | sort -t- -k2 -n); do
        read -r index _address _gpus <"$REGISTRY/$entry"
        role='<none>'
        [ "$index" = 0 ] && role=control-plane
        printf '%-10s %-7s %-14s %-5s %s\n' "$entry" Ready "$role" 1m v1.30.4
    done
}
case "${1:-} ${2:-}" in
    "get nodes" | "get node")
        if [ "${3:-}" = "-o" ] && [ "${4:-}" = json ] || [ "${3:-}" = "-ojson" ] || [ "${3:-}" = "--output=json" ]; then
            nodes_json
        else
            nodes_table
        fi
        ;;
    *)
        echo "runcrate sandbox kubectl supports: get nodes [-o json]" >&2
        exit 1
        ;;
esac
FAKE
    sim_register kubernetes
    log "kubelet stand-in registered with the node-0 API server"
    exit 0
fi

if is_reconfigure; then
    # Workers are about to join: a bootstrap token lives 2 hours, so renew it now.
    if is_head; then
        step "renew-token"
        export KUBECONFIG=/etc/kubernetes/admin.conf
        kubeadm token delete "$TOKEN" >/dev/null 2>&1 || true
        kubeadm token create "$TOKEN" --ttl 2h >/dev/null
        log "bootstrap token renewed for 2 hours"
    fi
    exit 0
fi

step "packages"
swapoff -a
sed -i '/\sswap\s/ s/^#*/#/' /etc/fstab
modprobe overlay
modprobe br_netfilter
printf 'overlay\nbr_netfilter\n' | write_file /etc/modules-load.d/k8s.conf 0644
printf 'net.bridge.bridge-nf-call-iptables = 1\nnet.bridge.bridge-nf-call-ip6tables = 1\nnet.ipv4.ip_forward = 1\n' \
    | write_file /etc/sysctl.d/k8s.conf 0644
sysctl --system >/dev/null
apt_install ca-certificates curl gpg containerd
mkdir -p /etc/apt/keyrings /etc/containerd
curl -fsSL "https://pkgs.k8s.io/core:/stable:/$K8S_MINOR/deb/Release.key" \
    | gpg --dearmor --yes -o /etc/apt/keyrings/kubernetes-apt-keyring.gpg
printf 'deb [signed-by=/etc/apt/keyrings/kubernetes-apt-keyring.gpg] https://pkgs.k8s.io/core:/stable:/%s/deb/ /\n' "$K8S_MINOR" \
    | write_file /etc/apt/sources.list.d/kubernetes.list 0644
# A new source was added: apt_install (lib.sh) must refresh the index again.
# shellcheck disable=SC2034
APT_UPDATED=""
apt_install kubelet kubeadm kubectl
apt-mark hold kubelet kubeadm kubectl
containerd config default | sed 's/SystemdCgroup = false/SystemdCgroup = true/' | write_file /etc/containerd/config.toml 0644
if command -v nvidia-ctk >/dev/null 2>&1; then
    nvidia-ctk runtime configure --runtime=containerd --set-as-default
fi
if has_systemd; then systemctl restart containerd; fi
printf 'KUBELET_EXTRA_ARGS=--node-ip=%s\n' "$RUNCRATE_PRIVATE_IP" | write_file /etc/default/kubelet 0644
if has_systemd; then systemctl enable kubelet; fi

# The bootstrap token and the cluster CA come from the control plane; workers pin the CA's
# hash, so they join only the API server that holds it.
if is_head; then
    step "control-plane"
    install_ca
    if [ ! -f /etc/kubernetes/admin.conf ]; then
        kubeadm init --apiserver-advertise-address="$HEAD_IP" --node-name="$NODE_NAME" \
            --pod-network-cidr=10.244.0.0/16 --token="$TOKEN" --token-ttl=2h
    fi
    export KUBECONFIG=/etc/kubernetes/admin.conf
    kubectl taint nodes "$NODE_NAME" node-role.kubernetes.io/control-plane:NoSchedule- 2>/dev/null || true
    step "network"
    curl -fsSL https://github.com/flannel-io/flannel/releases/latest/download/kube-flannel.yml \
        | sed 's/- --kube-subnet-mgr/- --kube-subnet-mgr\n        - --iface=wg0/' \
        | kubectl apply -f -
    step "gpu-plugin"
    kubectl apply -f https://raw.githubusercontent.com/NVIDIA/k8s-device-plugin/v0.16.2/deployments/static/nvidia-device-plugin.yml
    mkdir -p /root/.kube
    cp /etc/kubernetes/admin.conf /root/.kube/config
else
    step "join"
    if [ ! -f /etc/kubernetes/kubelet.conf ]; then
        kubeadm join "$HEAD_IP:6443" --token="$TOKEN" --node-name="$NODE_NAME" \
            --discovery-token-ca-cert-hash "$CA_HASH"
    fi
fi
log "kubernetes installed"
