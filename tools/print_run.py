"""Print what a tools/train_net.py run measured: trainer, wall time, final evaluation."""
import json
import os
import sys


def main(output_dir):
    path = os.path.join(output_dir, "run_info.json")
    if not os.path.exists(path):
        sys.exit(f"{path} does not exist: did the run finish?")
    with open(path) as f:
        info = json.load(f)
    scores = {k: round(v, 2) for d in info["final_eval"].values() for k, v in d.items()}
    print(f"{info['trainer']}: {info['wall_time_s']:.0f} s of training, final evaluation {scores}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "output/demo_pipeline_cpu")
