#!/usr/bin/env bash
# LiBai's own models on every layout from the seed alone, plugin and stock side by side:
# LiBai's GPT-2 (GPT2Dataset over text LiBai's preprocess tool indexed), BERT (BertDataset), ViT and Swin (the digits,
# random crop + mixup/cutmix), every dropout and drop-path on, one global batch per config on every layout.
# Writes benchmarks/results/zoo_equivalence.md and one loss-curve PNG per config under docs/.
#   benchmarks/zoo_equivalence.sh            # ITERS=20
set -euo pipefail
cd "$(dirname "$0")/.."
ITERS=${ITERS:-20}
PYTHON=${PYTHON:-.venv/bin/python}
LAYOUTS=(1 pp2 tp2 tp2xpp2 dp2 dp2xpp2 dp2xtp2xpp2)
CONFIGS=(configs/libai_gpt2_cpu.py configs/libai_bert_cpu.py configs/libai_vit_digits_cpu.py configs/libai_swin_digits_cpu.py)
OUT=${OUT:-benchmarks/results/zoo_equivalence.md}
COMMON=(--config-file "${CONFIGS[@]}" --layouts "${LAYOUTS[@]}" --iters "$ITERS" --rtol 1e-5 --timeout 3600)
{
    echo "# LiBai's own models: per-iteration raw loss vs 1 rank, $ITERS iterations, from the seed alone"
    echo
    echo "Produced by \`benchmarks/zoo_equivalence.sh\` ($(date -u +%Y-%m-%d), $($PYTHON -c 'import libai; print("LiBai", getattr(libai, "__version__", "?"))' 2>/dev/null), 2 shared CPU cores)."
    for trainer in libai_ext.ConsistentBatchTrainer libai.engine.DefaultTrainer; do
        plot=docs/zoo_equivalence_${trainer##*.}.png
        echo
        echo "## train.trainer=$trainer"
        echo
        echo '```'
        echo "$PYTHON tools/check_equivalence.py ${COMMON[*]} --plot $plot train.trainer=$trainer"
        echo '```'
        echo
        $PYTHON tools/check_equivalence.py "${COMMON[@]}" --plot "$plot" --workdir "output/zoo_equivalence/$trainer" \
            "train.trainer=$trainer" | sed -n '/per-iteration raw loss/,$p' || true
    done
} >"$OUT.tmp"
mv "$OUT.tmp" "$OUT"
cat "$OUT"
