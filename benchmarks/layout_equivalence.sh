#!/usr/bin/env bash
# Layout equivalence at 50 iterations, plugin and stock side by side:
# configs/demo_swin_digits_cpu.py from the seed alone, random crop + mixup/cutmix + label smoothing + dropout 0.1 +
# attention dropout 0.1 + drop-path 0.2, global batch 32 on every layout, every rank its own python/numpy/OneFlow
# stream (train.seed_scope=rank).  Rewrites the tracked benchmarks/results/layout_equivalence.md, on purpose (the
# source of docs/benchmarks.md); OUT=<file> writes elsewhere.
#   benchmarks/layout_equivalence.sh            # ITERS=50
set -euo pipefail
cd "$(dirname "$0")/.."
ITERS=${ITERS:-50}
LAYOUTS=(1 pp2 tp2 tp2xpp2 pp4 dp2 dp2xpp2 dp2xtp2xpp2)
OUT=${OUT:-benchmarks/results/layout_equivalence.md}
COMMON=(--config-file configs/demo_swin_digits_cpu.py --layouts "${LAYOUTS[@]}" --iters "$ITERS" --rtol 1e-5
        --timeout 1800 train.seed_scope=rank model.drop_rate=0.1 model.attn_drop_rate=0.1 model.drop_path_rate=0.2)
{
    echo "# One trajectory on every layout: Swin on the digits, $ITERS iterations from the seed alone"
    echo
    echo "Command: \`$([ "$ITERS" = 50 ] || echo "ITERS=$ITERS ")benchmarks/layout_equivalence.sh\`"
    echo "Host: $(hostname), $(nproc) CPU cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the start"
    for trainer in libai_ext.ConsistentBatchTrainer libai.engine.DefaultTrainer; do
        echo
        echo "## train.trainer=$trainer"
        echo
        echo '```'
        echo ".venv/bin/python tools/check_equivalence.py ${COMMON[*]} train.trainer=$trainer"
        echo '```'
        echo
        .venv/bin/python tools/check_equivalence.py "${COMMON[@]}" --workdir "output/layout_equivalence/$trainer" \
            "train.trainer=$trainer" | sed -n '/per-iteration raw loss/,$p' || true
    done
} >"$OUT.tmp"
mv "$OUT.tmp" "$OUT"
cat "$OUT"
