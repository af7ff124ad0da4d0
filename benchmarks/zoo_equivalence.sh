#!/usr/bin/env bash
# LiBai's own model zoo on every layout from the seed alone, plugin and stock side by side, on the installed LiBai
# line: GPT-2 (GPT2Dataset over text LiBai's preprocess tool indexed), BERT (BertDataset), T5 (T5Dataset, with its
# special tokens), ViT and Swin (the digits, random crop + mixup/cutmix), and on LiBai main also RoBERTa
# (RobertaDataset), SwinV2 and ResMLP; every dropout and drop-path on, one global batch per config on every layout.
# Writes benchmarks/results/zoo_equivalence[_libai_main].md (not kept in git) and rewrites one loss-curve PNG per config
# under docs/ (tracked),
# on purpose (the figures of docs/zoo_equivalence.md); OUT=<file> and PLOT=<png> write elsewhere.
#   benchmarks/zoo_equivalence.sh                                   # ITERS=20, pip's LiBai 0.1.1 in .venv
#   PYTHON=.venv-libai-main/bin/python benchmarks/zoo_equivalence.sh  # LiBai main
#   CONFIGS="libai_t5_cpu" benchmarks/zoo_equivalence.sh            # some of the zoo only
set -euo pipefail
cd "$(dirname "$0")/.."
ITERS=${ITERS:-20}
PYTHON=${PYTHON:-.venv/bin/python}
LAYOUTS=(1 pp2 tp2 tp2xpp2 dp2 dp2xpp2 dp2xtp2xpp2)
STOCK_LAYOUTS=(1 pp2 tp2 dp2)
MAIN=$($PYTHON -c 'import libai.models as m; print(int(hasattr(m, "ResMLP")))' 2>/dev/null)
ZOO="libai_gpt2_cpu libai_bert_cpu libai_t5_cpu libai_vit_digits_cpu libai_swin_digits_cpu"
TEXT="libai_gpt2_cpu libai_bert_cpu libai_t5_cpu"
VISION_STOCK="libai_vit_digits_cpu"  # stock Swin and SwinV2 hard-code fused dropouts with no CPU kernel
if [ "$MAIN" = 1 ]; then
    ZOO="$ZOO libai_roberta_cpu libai_swinv2_digits_cpu libai_resmlp_digits_cpu"
    TEXT="$TEXT libai_roberta_cpu"
    VISION_STOCK="$VISION_STOCK libai_resmlp_digits_cpu"
fi
CONFIGS=${CONFIGS:-$ZOO}
LINE=$([ "$MAIN" = 1 ] && echo libai_main || echo libai_v0_1)
OUT=${OUT:-benchmarks/results/zoo_equivalence$([ "$MAIN" = 1 ] && echo _libai_main).md}
# Each line's runs in folders of their own: a layout's output folder that holds another run's final checkpoint
# would be taken for this run's.
WORK=output/zoo_equivalence/$LINE
files() {  # the config files of the names in $CONFIGS that are also in $1
    for name in $CONFIGS; do [[ " $1 " == *" $name "* ]] && echo "configs/$name.py"; done
}
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
    echo "Command: \`$([ "$ITERS" = 20 ] || echo "ITERS=$ITERS ")$([ "$MAIN" = 1 ] && echo "PYTHON=$PYTHON ")benchmarks/zoo_equivalence.sh\`"
    echo "Host: $(hostname), $(nproc) CPU cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the start;" \
        "$($PYTHON -c 'import libai; print("LiBai", getattr(libai, "__version__", "?"))' 2>/dev/null)"
    mapfile -t ALL < <(files "$ZOO")
    run "train.trainer=libai_ext.ConsistentBatchTrainer" --config-file "${ALL[@]}" --layouts "${LAYOUTS[@]}" \
        --iters "$ITERS" --rtol 1e-5 --timeout 3600 --plot "${PLOT:-docs/zoo_equivalence$([ "$MAIN" = 1 ] && echo _libai_main).png}" \
        --workdir "$WORK/plugin" train.trainer=libai_ext.ConsistentBatchTrainer
    # Stock LiBai has no CPU kernel for the fused dropouts (libai_ext routes them): its text models run with the
    # fusions off, its Swin and SwinV2 (which hard-code them) cannot run on CPU at all.
    mapfile -t STOCK_TEXT < <(files "$TEXT")
    [ ${#STOCK_TEXT[@]} -eq 0 ] || run "train.trainer=libai.engine.DefaultTrainer: the text models, fusions off" \
        --config-file "${STOCK_TEXT[@]}" --layouts "${STOCK_LAYOUTS[@]}" --iters "$ITERS" --rtol 1e-5 \
        --timeout 3600 --workdir "$WORK/stock-text" train.trainer=libai.engine.DefaultTrainer \
        model.cfg.bias_dropout_fusion=False model.cfg.scale_mask_softmax_fusion=False
    mapfile -t STOCK_VISION < <(files "$VISION_STOCK")
    [ ${#STOCK_VISION[@]} -eq 0 ] || run "train.trainer=libai.engine.DefaultTrainer: the vision models it runs on CPU" \
        --config-file "${STOCK_VISION[@]}" --layouts "${STOCK_LAYOUTS[@]}" --iters "$ITERS" --rtol 1e-5 \
        --timeout 3600 --workdir "$WORK/stock-vision" train.trainer=libai.engine.DefaultTrainer
} >"$OUT.tmp"
mv "$OUT.tmp" "$OUT"
cat "$OUT"
