#!/usr/bin/env bash
# The seed's two-node YOLOv5 run, simulated on one machine with two network namespaces joined
# by a veth pair. Node A (10.77.0.1) hosts the rendezvous; one launcher per node:
#
#   node A: python -m torch.distributed.launch --nproc_per_node 2 --nnodes=2 --node_rank=0 \
#             --master_addr=10.77.0.1 --master_port=2289 train.py ... --device xdev
#   node B: the same with --node_rank=1
#
# XCCL_NODE_ID=nodeA/nodeB makes torch_xccl treat the namespaces as two hosts (TCP between
# them, shared memory within each); XCCL_SOCKET_IFNAME picks the veth. Needs root and iproute2.
# At the end every rank prints a parameter checksum and SHA-256; the script checks that all
# ranks agree.
#
#   DATA=/path/to/data.yaml examples/yolov5/scripts/two_nodes.sh [extra train.py flags]
# Environment: DATA (required), EPOCHS (2), BATCH (64), IMGSZ (128), DEVICE (xdev),
# NPROC (2 per node), CFG (yolov5n.yaml), PORT (2289), OUT (a new directory under /tmp).
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
: "${DATA:?set DATA to a data YAML, e.g. from data/make_synthetic.py}"
EPOCHS=${EPOCHS:-2} BATCH=${BATCH:-64} IMGSZ=${IMGSZ:-128} DEVICE=${DEVICE:-xdev}
NPROC=${NPROC:-2} CFG=${CFG:-yolov5n.yaml} PORT=${PORT:-2289}
OUT=${OUT:-$(mktemp -d /tmp/yolo_two_nodes.XXXX)}
mkdir -p "$OUT"
PY=${PYTHON:-$(command -v python3)}
NS_A=yoloA$$ NS_B=yoloB$$ ADDR_A=10.77.0.1 ADDR_B=10.77.0.2

cleanup() {
  ip netns del "$NS_A" 2>/dev/null || true  # deleting a namespace removes its veth end (and the peer)
  ip netns del "$NS_B" 2>/dev/null || true
}
trap cleanup EXIT
trap "exit 130" INT TERM HUP PIPE  # so that cleanup runs
ip netns add "$NS_A"
ip netns add "$NS_B"
ip link add vethA$$ type veth peer name vethB$$
ip link set vethA$$ netns "$NS_A"
ip link set vethB$$ netns "$NS_B"
ip -n "$NS_A" addr add $ADDR_A/24 dev vethA$$
ip -n "$NS_B" addr add $ADDR_B/24 dev vethB$$
for ns in "$NS_A" "$NS_B"; do ip -n "$ns" link set lo up; done
ip -n "$NS_A" link set vethA$$ up
ip -n "$NS_B" link set vethB$$ up
ip -n "$NS_A" addr show dev vethA$$ | grep "$ADDR_A" >/dev/null  # (no ping in minimal images)

node() {  # node_rank ns node_id ifname
  ip netns exec "$2" env XCCL_NODE_ID="$3" XCCL_SOCKET_IFNAME="$4" OMP_NUM_THREADS=1 \
    "$PY" -m torch.distributed.launch --nproc_per_node "$NPROC" --nnodes=2 --node_rank="$1" \
      --master_addr=$ADDR_A --master_port="$PORT" "$HERE/train.py" --data "$DATA" --cfg "$CFG" \
      --weights '' --epochs "$EPOCHS" --batch-size "$BATCH" --imgsz "$IMGSZ" --device "$DEVICE" \
      --project "$OUT" --name two_nodes --exist-ok "${@:5}"
}
echo "two nodes: $NS_A ($ADDR_A) and $NS_B ($ADDR_B), $NPROC processes each; logs in $OUT"
start=$(date +%s%N)
node 0 "$NS_A" nodeA vethA$$ "$@" >"$OUT/nodeA.log" 2>&1 & pid_a=$!
node 1 "$NS_B" nodeB vethB$$ "$@" >"$OUT/nodeB.log" 2>&1 & pid_b=$!
rc=0
wait $pid_a || rc=$?
wait $pid_b || rc=$?
end=$(date +%s%N)
# bytes that crossed the "network" (rendezvous + TCP data between the nodes)
ip -n "$NS_A" -s link show vethA$$ | awk '/RX:/{getline; rx=$1} /TX:/{getline; tx=$1} END{printf "veth of node A: %.1f MB received, %.1f MB sent\n", rx/1e6, tx/1e6}'
grep -hE "DDP:|mAP@0.5 |completed in" "$OUT/nodeA.log" || true
sums=$(cat "$OUT/nodeA.log" "$OUT/nodeB.log" | grep -oE "rank [0-9]+ final parameter checksum .*" | sort -n -k2)
echo "$sums"
nranks=$(echo "$sums" | grep -c . || true)
ndistinct=$(echo "$sums" | awk '{print $6, $8}' | sort -u | grep -c . || true)
ms=$(( (end - start) / 1000000 ))
printf "wall time (both launchers): %d.%01d s\n" $((ms / 1000)) $((ms % 1000 / 100))
if [ "$rc" -ne 0 ]; then
  echo "FAILED (exit $rc); see $OUT/nodeA.log and $OUT/nodeB.log"; tail -20 "$OUT/nodeA.log" "$OUT/nodeB.log"; exit 1
fi
if [ "$nranks" -ne $((2 * NPROC)) ] || [ "$ndistinct" -ne 1 ]; then
  echo "FAILED: expected $((2 * NPROC)) ranks with identical weights, got $nranks ranks, $ndistinct distinct"; exit 1
fi
echo "OK: identical weights on all $nranks ranks of 2 nodes"
