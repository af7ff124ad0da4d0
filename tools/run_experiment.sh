#!/usr/bin/env bash
# The experiment of docs/experiment.md: Swin on the digits, on CPU ranks, with augmentation and mixup on.
#   single       1 rank, stock LiBai                     (the reference: nothing to pair)
#   pp2-stock    2-stage pipeline, stock LiBai            (libai.engine.DefaultTrainer)
#   pp2-fixed    2-stage pipeline, libai_ext.ConsistentBatchTrainer
#   pp2-stock-globalseed   pp2-stock with every rank seeded alike (the seeding hook alone)
# Same seed, iterations, data and model for all; only the layout, trainer and seed scope change.
# seed_scope=rank gives every rank its own reproducible numpy stream: what stock LiBai 0.1.1 has
# (it never seeds), minus the irreproducibility. See docs/experiment.md.
#
# Everything goes under output/experiment/ (the runs, their logs, experiment.md and experiment.png);
# UPDATE_DOCS=1 also replaces the tracked docs/experiment.png, on purpose.
#   tools/run_experiment.sh                  # all runs, then output/experiment/experiment.{md,png}
#   tools/run_experiment.sh single           # only the named runs (no plot)
#   UPDATE_DOCS=1 tools/run_experiment.sh    # ...and the plot of docs/experiment.md
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
OUT=output/experiment
COMMON=(--config-file configs/demo_swin_digits_cpu.py train.seed=1234 train.train_iter=1500
        train.evaluation.eval_period=100 train.log_period=10)
STOCK=train.trainer=libai.engine.DefaultTrainer
FIXED=train.trainer=libai_ext.ConsistentBatchTrainer
PP2=train.dist.pipeline_parallel_size=2

run() {  # run NAME NPROC OVERRIDES...
    local name=$1 nproc=$2
    shift 2
    rm -rf "$OUT/$name"  # metrics.json and losses.jsonl append: start each run clean
    mkdir -p "$OUT/$name"
    local cmd=(timeout --kill-after=30 1200 "$PY" -m oneflow.distributed.launch --nproc_per_node "$nproc"
               tools/train_net.py "${COMMON[@]}" train.output_dir="$OUT/$name" "$@")
    echo "+ ${cmd[*]}"
    local start=$SECONDS
    "${cmd[@]}" >"$OUT/$name.log" 2>&1 || { echo "$name failed: see $OUT/$name.log" >&2; tail -20 "$OUT/$name.log" >&2; exit 1; }
    echo "  $name: $((SECONDS - start)) s end to end; $(grep -o 'Acc@1=[0-9.]*' "$OUT/$name.log" | tail -1)"
}

SELECTED=("$@")
wanted() { [ ${#SELECTED[@]} -eq 0 ] || [[ " ${SELECTED[*]} " == *" $1 "* ]]; }

wanted single && run single 1 "$STOCK" train.seed_scope=rank
wanted pp2-stock && run pp2-stock 2 "$PP2" "$STOCK" train.seed_scope=rank
wanted pp2-fixed && run pp2-fixed 2 "$PP2" "$FIXED" train.seed_scope=rank
wanted pp2-stock-globalseed && run pp2-stock-globalseed 2 "$PP2" "$STOCK" train.seed_scope=global

if [ $# -eq 0 ]; then
    "$PY" tools/compare_runs.py --out "$OUT/experiment" \
        --title "Swin on digits, CPU: 1 rank vs 2-stage pipeline (mixup on, seed 1234, 1500 iterations)" \
        --runs single="$OUT/single" pp2-stock="$OUT/pp2-stock" pp2-fixed="$OUT/pp2-fixed" \
               pp2-stock-globalseed="$OUT/pp2-stock-globalseed"
    if [ "${UPDATE_DOCS:-0}" = 1 ]; then
        cp "$OUT/experiment.png" docs/experiment.png  # the tracked plot of docs/experiment.md, replaced on purpose
    fi
fi
