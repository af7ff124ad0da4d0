#!/usr/bin/env bash
# OneFlow 0.9.0: two `oneflow.distributed.launch --nnodes 2` launchers on one machine over loopback.
#
#   tools/repro/loopback_two_nodes.sh [python] [script]     # default: .venv/bin/python, two_nodes_step.py
#
# Both launchers use --master_addr 127.0.0.1 (what one would try to simulate 2 hosts on 1 machine).
# Prints what each rank printed, and whether the job ended within LIMIT seconds (default 120).
set -u
cd "$(dirname "$0")/../.."
PY=${1:-.venv/bin/python}
SCRIPT=${2:-tools/repro/two_nodes_step.py}
LIMIT=${LIMIT:-120}
LOGS=$(mktemp -d)
start=$(date +%s)
groups=()
for node in 0 1; do  # each launcher and its ranks in a process group of their own
  setsid "$PY" -m oneflow.distributed.launch --nnodes 2 --node_rank $node --nproc_per_node 2 \
    --master_addr 127.0.0.1 --master_port 29511 "$SCRIPT" >"$LOGS/node$node.log" 2>&1 &
  groups+=($!)
done
running() { for g in "${groups[@]}"; do kill -0 "$g" 2>/dev/null && return 0; done; return 1; }
while [ $(( $(date +%s) - start )) -lt "$LIMIT" ] && running; do sleep 1; done
for g in "${groups[@]}"; do kill -KILL -- "-$g" 2>/dev/null; done
wait
elapsed=$(( $(date +%s) - start ))
grep -h "sum of ranks" "$LOGS"/node*.log
done_ranks=$(grep -h -c "sum of ranks" "$LOGS"/node*.log | paste -sd+ | bc)
if [ "$done_ranks" -lt 4 ] && [ "$elapsed" -ge "$LIMIT" ]; then
  echo "REPRODUCED: $done_ranks of 4 ranks finished; the two launchers were still running after ${elapsed} s (killed)"
else
  echo "NOT REPRODUCED: $done_ranks of 4 ranks finished in ${elapsed} s"
fi
echo "logs: $LOGS"
