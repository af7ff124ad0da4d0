"""How far stock LiBai's pipeline puts a mixed image's label off, at data-parallel size 1 (docs/experiment.md).

Stage 0 mixes the images and the last stage the labels, each rank from its own numpy stream; at dp=1 both read the
same samples and flowvision's Mixup pairs sample i with B-1-i, so only the mixing weight differs. This draws
flowvision's own per-batch lambda (mixup alpha 0.8, cutmix alpha 1.0, switch 0.5, label smoothing 0.1, the demo
Swin's recipe) from two independent streams, without touching a tensor, and prints:

    mean |lambda_image - lambda_label| 0.310, median 0.260
    label mass on the wrong member of the pair 0.251
    samples whose label favours the digit covering less of the image 0.393

    .venv/bin/python benchmarks/mixup_label_mismatch.py          # about 30 s of CPU
"""
import argparse


def batch_lambdas(seed, batches, shape=(32, 3, 32, 32)):
    """flowvision ``Mixup._mix_batch``'s lambda, one per batch."""
    import numpy as np
    from flowvision.data.mixup import cutmix_bbox_and_lam

    from libai_ext.data import build_mixup

    np.random.seed(seed)
    mixup = build_mixup(num_classes=10, mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1)
    out = np.empty(batches)
    for k in range(batches):
        lam, use_cutmix = mixup._params_per_batch()
        if lam != 1.0 and use_cutmix:
            _, lam = cutmix_bbox_and_lam(shape, lam, ratio_minmax=mixup.cutmix_minmax, correct_lam=mixup.correct_lam)
        out[k] = lam
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=200_000, help="batches drawn per stream (default: 200000)")
    args = parser.parse_args(argv)
    import numpy as np

    image, label = batch_lambdas(1, args.batches), batch_lambdas(2, args.batches)  # stage 0, the last stage
    gap = np.abs(image - label)
    print(f"mean |lambda_image - lambda_label| {gap.mean():.3f}, median {np.median(gap):.3f}")
    # (1 - smoothing) of the mass is mixed; 0.9 of the pairs hold two different digits
    print(f"label mass on the wrong member of the pair {(gap * 0.9 * 0.9).mean():.3f}")
    print(f"samples whose label favours the digit covering less of the image "
          f"{((image - .5) * (label - .5) < 0).mean() * 0.9:.3f}")


if __name__ == "__main__":
    main()
