#!/usr/bin/env bash
# install_kubernetes: containerd + kubelet/kubeadm/kubectl on every node; node-0 runs the
# control plane (kubeadm init, schedulable for GPU pods), workers kubeadm join it over
# the private network; flannel on wg0 and the NVIDIA device plugin make
# nvidia.com/gpu allocatable. Run on the head first, then workers. vm / bare_metal only.
set -euo pipefail

K8S_MINOR="${RUNCRATE_K8S_MINOR:-v1.30}"
# Unverified: this path (kubeadm, flannel, the device plugin) has never run in this project's
# tests or CI (no machine here can run a kubelet; docs/nodeops.md). What it fetches is pinned
# by the control plane (settings.KUBERNETES_*): a version, and the sha256 the manifest must
# have; without both checksums the real install refuses before it changes anything.
FLANNEL_VERSION="${RUNCRATE_FLANNEL_VERSION:-}"
FLANNEL_SHA256="${RUNCRATE_FLANNEL_SHA256:-}"
DEVICE_PLUGIN_VERSION="${RUNCRATE_DEVICE_PLUGIN_VERSION:-}"
DEVICE_PLUGIN_SHA256="${RUNCRATE_DEVICE_PLUGIN_SHA256:-}"
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

# fetch_pinned URL SHA256 NAME: print the file at URL only when its sha256 is SHA256.
fetch_pinned() {
    local url="$1" sum="$2" name="$3" file
    [ -n "$sum" ] || die "no sha256 pinned for the $name manifest: set it after checking the file (docs/nodeops.md)"
    file="$(mktemp)"
    curl -fsSL "$url" -o "$file" || { rm -f "$file"; die "could not fetch the $name manifest from $url"; }
    if ! printf '%s  %s\n' "$sum" "$file" | sha256sum -c --status; then
        rm -f "$file"
        die "the $name manifest at $url does not have the pinned sha256 $sum"
    fi
    cat "$file"
    rm -f "$file"
}

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

if is_sandbox || [ "${RUNCRATE_KUBELET_STANDIN:-0}" = 1 ]; then
    # Where no kubelet can run (a sandbox, real nodes on one computer) the stand-in overlay
    # (clusters/providers/local/standins/overlay.sh), streamed only there, registers the node.
    standin_install kubernetes
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

for pin in FLANNEL_VERSION FLANNEL_SHA256 DEVICE_PLUGIN_VERSION DEVICE_PLUGIN_SHA256; do
    [ -n "${!pin}" ] || die "KUBERNETES_$pin is not set on the control plane: Kubernetes on real machines needs flannel's and the NVIDIA device plugin's version and sha256 (docs/nodeops.md)"
done

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
    flannel="$(fetch_pinned "https://github.com/flannel-io/flannel/releases/download/$FLANNEL_VERSION/kube-flannel.yml" \
        "$FLANNEL_SHA256" "flannel $FLANNEL_VERSION")"
    kubectl apply -f - <<<"${flannel//- --kube-subnet-mgr/- --kube-subnet-mgr$'\n'        - --iface=wg0}"
    step "gpu-plugin"
    fetch_pinned "https://raw.githubusercontent.com/NVIDIA/k8s-device-plugin/$DEVICE_PLUGIN_VERSION/deployments/static/nvidia-device-plugin.yml" \
        "$DEVICE_PLUGIN_SHA256" "NVIDIA device plugin $DEVICE_PLUGIN_VERSION" | kubectl apply -f -
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
