# Sourced by the scripts that run a group: installs Debian's etcd when
# missing and starts three members on loopback (client ports
# ${ETCD_CLIENT}1-3, peer ${ETCD_PEER}1-3: 24571-3 and 24581-3 unless set;
# fsync on, etcd's default) in $dir, their pids in pids; sets endpoints.
# ETCD_ARGS adds flags to each member. The caller makes dir and pids and
# kills them on exit.
ETCD_CLIENT=${ETCD_CLIENT:-2457}
ETCD_PEER=${ETCD_PEER:-2458}
need=()
command -v etcd >/dev/null || need+=(etcd-server)
command -v etcdctl >/dev/null || need+=(etcd-client)
command -v curl >/dev/null || need+=(curl)
command -v python3 >/dev/null || need+=(python3)
if [ ${#need[@]} -gt 0 ]; then
	echo "installing ${need[*]}" >&2
	apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null
fi

cluster="" endpoints=""
for i in 1 2 3; do
	cluster+="${cluster:+,}m$i=http://127.0.0.1:$ETCD_PEER$i"
	endpoints+="${endpoints:+,}http://127.0.0.1:$ETCD_CLIENT$i"
done
for i in 1 2 3; do
	etcd --name "m$i" --data-dir "$dir/etcd$i" \
		--listen-client-urls "http://127.0.0.1:$ETCD_CLIENT$i" --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT$i" \
		--listen-peer-urls "http://127.0.0.1:$ETCD_PEER$i" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER$i" \
		--initial-cluster "$cluster" --initial-cluster-state new --initial-cluster-token emq-bench \
		${ETCD_ARGS:-} >"$dir/etcd$i.log" 2>&1 &
	pids+=($!)
done
until ETCDCTL_API=3 etcdctl --endpoints "$endpoints" endpoint health >/dev/null 2>&1; do
	for i in 1 2 3; do
		kill -0 "${pids[-$i]}" 2>/dev/null || { tail -3 "$dir"/etcd*.log >&2; exit 1; }
	done
	sleep 0.2
done
echo "etcd $(etcd --version | awk '/etcd Version/ {print $3}'), 3 members at $endpoints" >&2
