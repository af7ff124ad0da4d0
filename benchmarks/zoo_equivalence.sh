#!/usr/bin/env bash
# LiBai's own models on every layout from the seed alone, plugin and stock side by side:
# LiBai's GPT-2 (GPT2Dataset over text LiBai's preprocess tool indexed), BERT (BertDataset), ViT and Swin (the digits,
# random crop + mixup/cutmix), every dropout and drop-path on, one global batch per config on every layout.
# Rewrites the tracked benchmarks/results/zoo_equivalence.md and one loss-curve PNG per config under docs/, on purpose
# (the figures of docs/zoo_equivalence.md); OUT=<file> and PLOT=<png> write elsewhere.
#   benchmarks/zoo_equivalence.sh            # ITERS=20
set -euo pipefail
cd "$(dirname "$0")/.."
ITERS=${ITERS:-20}
PYTHON=${PYTHON:-.venv/bin/python}
LAYOUTS=(1 pp2 tp2 tp2xpp2 dp2 dp2xpp2 dp2xtp2xpp2)
CONFIGS=(configs/libai_gpt2_cpu.py configs/libai_bert_cpu.py configs/libai_vit_digits_cpu.py configs/libai_swin_digits_cpu.py)
OUT=${OUT:-benchmarks/results/zoo_equivalence.md}
COMMON=(--config-file "${CONFIGS[@]}" --layouts "${LAYOUTS[@]}" --iters "$ITERS" --rtol 1e-5 --timeout 3600)
STOCK_LAYOUTS=(1 pp2 tp2 dp2)
run() {  # a title, the tool's arguments; prints the command and the tables
    echo
    echo "## $1"
    shift
    echo
    echo '```'
    echo "$PYTHON tools/check_equivalence.py $*"
    echo '```'
    echo
    $PYTHON tools/check_equivalence.py "$@" | sed -n '/per-iteration raw loss/,$p' || true
}
{
    echo "# LiBai's own models: per-iteration raw loss vs 1 rank, $ITERS iterations, from the seed alone"
    echo
    echo "Command: \`$([ "$ITERS" = 20 ] || echo "ITERS=$ITERS ")benchmarks/zoo_equivalence.sh\`"
    echo "Host: $(hostname), $(nproc) CPU cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the start;" \
        "$($PYTHON -c 'import libai; print("LiBai", getattr(libai, "__version__", "?"))' 2>/dev/null)"
    run "train.trainer=libai_ext.ConsistentBatchTrainer" "${COMMON[@]}" --plot "${PLOT:-docs/zoo_equivalence.png}" \
        --workdir output/zoo_equivalence/plugin train.trainer=libai_ext.ConsistentBatchTrainer
    # Stock LiBai has no CPU kernel for the fused dropouts (libai_ext routes them): its text models run with the
    # fusions off, its Swin (which hard-codes them) cannot run on CPU at all.
    run "train.trainer=libai.engine.DefaultTrainer: GPT-2 and BERT, fusions off" \
        --config-file configs/libai_gpt2_cpu.py configs/libai_bert_cpu.py --layouts "${STOCK_LAYOUTS[@]}" \
        --iters "$ITERS" --rtol 1e-5 --timeout 3600 --workdir output/zoo_equivalence/stock-text \
        train.trainer=libai.engine.DefaultTrainer model.cfg.bias_dropout_fusion=False \
        model.cfg.scale_mask_softmax_fusion=False
    run "train.trainer=libai.engine.DefaultTrainer: ViT" \
        --config-file configs/libai_vit_digits_cpu.py --layouts "${STOCK_LAYOUTS[@]}" --iters "$ITERS" --rtol 1e-5 \
        --timeout 3600 --workdir output/zoo_equivalence/stock-vit train.trainer=libai.engine.DefaultTrainer
} >"$OUT.tmp"
mv "$OUT.tmp" "$OUT"
cat "$OUT"
