"""``libai-ext-simulate-layout`` (``tools/simulate_layout.py``): every rank of a (dp, tp, pp) layout
simulated on one host, each rank's box of every draw computed through its own code path and compared
with the 1-rank global draw (``libai_ext.testing.simulate_layout``)."""
import sys

from .common import ToolParser, epilog

DESCRIPTION = """\
Simulate every rank of a (dp, tp, pp) layout on this host: for each draw site (dropout and drop-path
masks on activations and attention probabilities, under gradient accumulation; initial weights split
by tp and placed by pp; flow.rand by global position), each rank computes its box through its own code
path (the eager host kernel and int32-op paths, the global-op path of nn.Graph and initial weights),
compared with the same positions of the 1-rank draw: corners and edges of each box, random positions,
both sides of every multiple of 2**31 of the index.  First, the model at reduced widths: every rank's whole
box through the chunked int-op path (chunks small enough that every boundary is crossed, the last chunk
partial) and the chunked apply step, and the whole tensor through OneFlow's global ops and an nn.Graph on one
rank ("whole" lines).  Prints one line per draw site."""

EXIT_CODES = ((0, "every rank's values equal the 1-rank draw at every position compared"),
              (1, "a difference: the site, rank, its (stage, dp, tp) coordinates and the first differing "
                  "position are printed"),
              (2, "bad arguments"))
EXAMPLES = ("libai-ext-simulate-layout --layout 32,8,4 --model gpt3-175b",
            "libai-ext-simulate-layout --layout 8,8,16 --model gpt2-xl --micro-batches 2",
            "libai-ext-simulate-layout --layout 4,2,1 --site probs:mask@0.1:64x16x512x512:S0,S1:rows",
            "",
            "# a fault injected into the rank path: exits 1, naming the site, the rank and the position",
            "libai-ext-simulate-layout --layout 32,8,4 --model gpt3-175b --mutate truncate32",
            "libai-ext-simulate-layout --layout 4,2,1 --model gpt3-175b --mutate chunk-last")
MODELS = ("gpt3-175b", "gpt2-xl", "bert-large", "vit-h14", "swin-b")
MUTATIONS = ("box-offset", "stride", "axis", "truncate32", "chunk-last", "chunk-offset", "chunk-swap", "apply-last")


def build_parser():
    parser = ToolParser(description=DESCRIPTION, epilog=epilog(exit_codes=EXIT_CODES, examples=EXAMPLES))
    parser.add_argument("--layout", required=True, metavar="DP,TP,PP", help="the parallel layout, e.g. 32,8,4 (required)")
    parser.add_argument("--model", choices=MODELS, help="a model's draw sites at real size (default: none; then --site)")
    parser.add_argument("--site", action="append", default=[], metavar="NAME:KIND:SHAPE:SBP[:rows]",
                        help="a draw site given directly (repeatable): KIND mask@RATE or values, SHAPE D0xD1x..., "
                             "SBP the (data, tensor) pair, e.g. S0,S1; ':rows' when dim 0 is a micro-batch's rows (default: none)")
    parser.add_argument("--micro-batches", type=int, default=4,
                        help="micro-batches per step: gradient accumulation or pipeline micro-batches (default: %(default)s)")
    parser.add_argument("--mutate", choices=MUTATIONS, help="inject this fault into the rank path or a box's assembly "
                        "from chunks, the run must then fail; it stops at the first difference (default: none)")
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.model is None and not args.site:
        parser.error("give --model or at least one --site")
    if args.micro_batches < 1:
        parser.error("--micro-batches must be at least 1")
    from ..testing import simulate_layout as sim  # after parsing: imports OneFlow
    try:
        layout = sim.parse_layout(args.layout, args.micro_batches)
        sites = [sim.parse_site(text) for text in args.site]
        model = sim.MODELS[args.model] if args.model else None
        if args.mutate:
            print(f"mutation {args.mutate}: {sim.MUTATIONS[args.mutate]}")
        lines, findings = sim.simulate(layout, model, sites, args.mutate)
    except ValueError as error:
        parser.error(str(error))
    print(f"{len(lines)} draw sites on {layout.world} ranks (dp {layout.dp}, tp {layout.tp}, pp {layout.pp}, "
          f"{layout.micro_batches} micro-batches): {'all equal' if not findings else f'{len(findings)} differ'}")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
