"""Print what a tools/train_net.py run measured: trainer, wall time, final evaluation."""
import json
import os
import sys


def flat_scores(results):
    """LiBai returns {metric: value} for one test set, {dataset: {metric: value}} for several."""
    scores = {}
    for key, value in results.items():
        if isinstance(value, dict):
            scores.update({f"{key}/{k}": v for k, v in value.items()})
        else:
            scores[key] = value
    return {k: round(v, 2) for k, v in scores.items()}


def main(output_dir):
    path = os.path.join(output_dir, "run_info.json")
    if not os.path.exists(path):
        sys.exit(f"{path} does not exist: did the run finish?")
    with open(path) as f:
        info = json.load(f)
    print(f"{info['trainer']}: {info['wall_time_s']:.0f} s of training, "
          f"final evaluation {flat_scores(info['final_eval'])}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "output/demo_pipeline_cpu")
