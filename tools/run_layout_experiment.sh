#!/usr/bin/env bash
# The layout experiment: does the parallel layout change the training?  Swin on the digits, CPU ranks,
# random crop + mixup/cutmix + label smoothing + dropout 0.1 + attention dropout 0.1 + drop-path 0.2,
# from the seed alone (no shared checkpoint), the same global batch of 32 on every layout:
#   1 rank, pp2, tp2 x pp2, (dp, tp, pp) = (2, 2, 2)
# once with libai_ext.ConsistentBatchTrainer (train.randomness=layout_invariant, the default) and once
# with stock LiBai (libai.engine.DefaultTrainer, train.seed_scope=rank: each rank its own stream, as
# stock LiBai's unseeded ranks have).  Then output/layout_experiment/{plugin,stock}.{png,md}: loss and top-1
# curves overlaid, and each layout's largest relative raw-loss difference from its 1-rank run. Everything goes
# under output/layout_experiment/; UPDATE_DOCS=1 also replaces the tracked plots of docs/layout_invariance.md
# (docs/layout_experiment.png, docs/layout_experiment_stock.png), on purpose.
#
#   tools/run_layout_experiment.sh                # ITERS=300 by default
#   ITERS=120 EVAL=30 tools/run_layout_experiment.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
OUT=output/layout_experiment
ITERS=${ITERS:-300}
EVAL=${EVAL:-50}
COMMON=(--config-file configs/demo_swin_digits_cpu.py train.seed=1234 train.train_iter="$ITERS"
        train.evaluation.eval_period="$EVAL" train.log_period=10
        model.drop_rate=0.1 model.attn_drop_rate=0.1 model.drop_path_rate=0.2)
PLUGIN=(train.trainer=libai_ext.ConsistentBatchTrainer)
STOCK=(train.trainer=libai.engine.DefaultTrainer train.seed_scope=rank)
declare -A LAYOUT=(
    [1]="1 1 1" [pp2]="1 1 2" [tp2xpp2]="1 2 2" [dp2xtp2xpp2]="2 2 2"
)
ORDER=(1 pp2 tp2xpp2 dp2xtp2xpp2)

run() {  # run NAME LAYOUT OVERRIDES...
    local name=$1 layout=$2
    shift 2
    read -r dp tp pp <<<"${LAYOUT[$layout]}"
    rm -rf "$OUT/$name"  # metrics.json and losses.jsonl append: start each run clean
    mkdir -p "$OUT/$name"
    local cmd=(timeout --kill-after=30 3000 "$PY" -m oneflow.distributed.launch --nproc_per_node $((dp * tp * pp))
               tools/train_net.py "${COMMON[@]}" train.output_dir="$OUT/$name"
               train.dist.data_parallel_size="$dp" train.dist.tensor_parallel_size="$tp"
               train.dist.pipeline_parallel_size="$pp" train.train_micro_batch_size=$((32 / dp)) "$@")
    echo "+ ${cmd[*]}"
    local start=$SECONDS
    "${cmd[@]}" >"$OUT/$name.log" 2>&1 || { echo "$name failed: see $OUT/$name.log" >&2; tail -20 "$OUT/$name.log" >&2; exit 1; }
    echo "{\"wall_time_s\": $((SECONDS - start))}" >"$OUT/$name/run_info.json"
    echo "  $name: $((SECONDS - start)) s end to end; $(grep -o 'Acc@1=[0-9.]*' "$OUT/$name.log" | tail -1)"
}

for layout in "${ORDER[@]}"; do
    run "plugin-$layout" "$layout" "${PLUGIN[@]}"
    run "stock-$layout" "$layout" "${STOCK[@]}"
done

for kind in plugin stock; do
    "$PY" tools/compare_runs.py --out "$OUT/$kind" --reference 1 \
        --title "$kind: Swin on digits from seed 1234, $ITERS iterations, global batch 32" \
        --runs $(for layout in "${ORDER[@]}"; do echo "$layout=$OUT/$kind-$layout"; done)
    if [ "${UPDATE_DOCS:-0}" = 1 ]; then  # the tracked plots of docs/layout_invariance.md, replaced on purpose
        cp "$OUT/$kind.png" "docs/layout_experiment$([ "$kind" = plugin ] || echo _stock).png"
    fi
done
