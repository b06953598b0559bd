#!/usr/bin/env bash
# Checks what `make test`, `make demo` and `make bench` need before any long
# build starts: root, the commands below and the kernel features the test
# cluster uses. As root on Debian or Ubuntu it installs the missing commands
# with apt-get; anywhere else it stops at once and prints the command to run.
#
# Overrides, for scripts/prereqs_test.go (which simulates other machines):
#   EIP_PREREQS_UID         the effective user id to assume
#   EIP_PREREQS_OS_RELEASE  the os-release file to read (/etc/os-release)
#   EIP_PREREQS_POLICY_RC   the policy-rc.d written during the install (/usr/sbin/policy-rc.d)
set -euo pipefail

# One command a line: the command (or the absolute path of a program not on
# PATH), the Debian/Ubuntu package that provides it, and what needs it. A
# test that needs a new tool adds its line here.
requirements='
ip       iproute2      network namespaces, veth pairs and bridges of the test cluster
nft      nftables      cutting a node off the API server (testenv faults)
ping     iputils-ping  the demo and the smoke tests ping from the client namespace
unshare  util-linux    the kernel check below
nsenter  util-linux    starting real kubelet nodes inside a node namespace
setpriv  util-linux    running eipd with exactly the DaemonSet privileges
runc     runc          the container runtime of real kubelet nodes
dbus-daemon  dbus-daemon  the system bus of each real kubelet node (graceful node shutdown)
/usr/lib/systemd/systemd-logind  systemd  the login manager that announces a shutdown to the kubelet of a real node
sysctl   procps        turning on forwarding inside real kubelet nodes
bird     bird2         the BGP router of the route-mode tests
birdc    bird2         querying that router
gcc      gcc           cgo, which the race detector of make test needs
'

uid=${EIP_PREREQS_UID:-$(id -u)}
os_release=${EIP_PREREQS_OS_RELEASE:-/etc/os-release}
policy_rc=${EIP_PREREQS_POLICY_RC:-/usr/sbin/policy-rc.d}

say() { echo "prereqs: $*" >&2; }

# missing prints "command package" for every required command not on PATH.
missing() {
	local cmd pkg _
	while read -r cmd pkg _; do
		[[ -z $cmd ]] && continue
		command -v "$cmd" >/dev/null 2>&1 || echo "$cmd $pkg"
	done <<<"$requirements"
}

# debian_like succeeds on Debian, Ubuntu and their derivatives.
debian_like() {
	[[ -r $os_release ]] || return 1
	local ids
	# shellcheck disable=SC1090
	ids=$(. "$os_release" && echo " ${ID:-} ${ID_LIKE:-} ")
	[[ $ids == *" debian "* || $ids == *" ubuntu "* ]]
}

# apt_install runs apt-get (update once, then install) for the given packages.
# Services that a package would start (bird) stay stopped: the tests run
# their own instances inside network namespaces.
apt_install() {
	local own_policy=""
	if [[ ! -e $policy_rc ]]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy_rc" && chmod 0755 "$policy_rc" && own_policy=$policy_rc
	fi
	local rc=0
	{
		DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
	} || rc=$?
	[[ -n $own_policy ]] && rm -f "$own_policy"
	return "$rc"
}

# kernel checks, in a throwaway network namespace that dies with the
# process, the features the test cluster uses.
kernel() {
	local errs=""
	if ! unshare --net true 2>/dev/null; then
		echo "kernel: cannot create a network namespace (CONFIG_NET_NS, or a container without CAP_SYS_ADMIN)"
		return
	fi
	errs=$(unshare --net sh -c '
		ip link add eipck0 type veth peer name eipck1 2>/dev/null || echo "kernel: no veth pairs (CONFIG_VETH: modprobe veth)"
		ip link add eipck2 type bridge 2>/dev/null || echo "kernel: no bridges (CONFIG_BRIDGE: modprobe bridge)"
		ip -6 addr add 2001:db8::1/64 dev lo 2>/dev/null || echo "kernel: no IPv6 (CONFIG_IPV6, or ipv6.disable=1 on the kernel command line)"
		nft add table inet eipck 2>/dev/null || echo "kernel: no nftables inet tables (CONFIG_NF_TABLES_INET: modprobe nf_tables)"
	')
	if [[ ! -e /sys/fs/cgroup/cgroup.controllers && ! -d /sys/fs/cgroup/memory ]]; then
		errs+=${errs:+$'\n'}"kernel: no cgroup hierarchy with a memory controller under /sys/fs/cgroup"
	fi
	[[ -n $errs ]] && echo "$errs"
	return 0
}

problems=()
[[ $uid == 0 ]] || problems+=("not root: the test cluster needs root (network namespaces, raw sockets); run make as root")
command -v go >/dev/null 2>&1 || problems+=("go not found: install Go $(sed -n 's/^go //p' "$(dirname "$0")/../go.mod") or newer from https://go.dev/dl into /usr/local/go")

lacking=$(missing)
if [[ -n $lacking ]]; then
	cmds=$(cut -d' ' -f1 <<<"$lacking" | xargs)
	pkgs=$(cut -d' ' -f2 <<<"$lacking" | awk '!seen[$0]++' | xargs)
	if debian_like && [[ $uid == 0 && ${#problems[@]} == 0 ]]; then
		say "installing $pkgs (missing: $cmds)"
		apt_install $pkgs || problems+=("apt-get install $pkgs failed; run it by hand and read its error")
		still=$(missing | cut -d' ' -f1 | xargs)
		[[ -z $still ]] || problems+=("still missing after apt-get install $pkgs: $still (is PATH missing /usr/sbin?)")
	elif debian_like; then
		sudo=""
		[[ $uid == 0 ]] || sudo="sudo "
		problems+=("missing $cmds: run ${sudo}apt-get install -y --no-install-recommends $pkgs")
	else
		problems+=("missing $cmds: install them with your distribution's package manager (the Debian packages are: $pkgs) and run again")
	fi
fi

if [[ ${#problems[@]} == 0 ]]; then
	while read -r line; do
		[[ -n $line ]] && problems+=("$line")
	done <<<"$(kernel)"
fi

if [[ ${#problems[@]} != 0 ]]; then
	for p in "${problems[@]}"; do say "$p"; done
	exit 1
fi
say "ok"
