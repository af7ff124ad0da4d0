"""``libai-ext-simulate-layout``: every rank of (32, 8, 4) and (8, 8, 16) with GPT-3 175B's shapes, simulated on
one host, equals the 1-rank draw; each fault injected into the rank path (``--mutate``) is found."""
import re

import pytest

from libai_ext.cli import simulate_layout as cli
from libai_ext.testing import simulate_layout as sim

SITE_LINE = re.compile(r"^(OK|FAIL) (.+?) (mask|values) [\dx]+ sbp \[.*\] stages \[.*\]: (\d+) ranks, (\d+) boxes, "
                       r"(\d+) positions")


def run(capsys, *argv):
    code = cli.main(list(argv))
    out = capsys.readouterr().out
    return code, out


def site_lines(out):
    return [SITE_LINE.match(line) for line in out.splitlines() if SITE_LINE.match(line)]


def expected_sites(model, layout):
    return [site.name for site in sim.model_sites(sim.MODELS[model], layout)]


def check_clean(capsys, layout_text, model, micro_batches=4):
    code, out = run(capsys, "--layout", layout_text, "--model", model, "--micro-batches", str(micro_batches))
    lines = site_lines(out)
    layout = sim.parse_layout(layout_text, micro_batches)
    assert [m.group(2) for m in lines] == expected_sites(model, layout), out  # every site, one line each
    assert all(m.group(1) == "OK" for m in lines), out
    assert code == 0, out
    # every rank of every stage that holds an activation took part
    activations = [m for m in lines if m.group(2) in ("attention-probs dropout", "hidden dropout")]
    assert activations and all(int(m.group(4)) == layout.world for m in activations), out
    assert all(int(m.group(6)) > 0 for m in lines), out
    assert "all equal" in out
    return out


@pytest.mark.long
def test_gpt3_on_32_8_4(capsys):
    out = check_clean(capsys, "32,8,4", "gpt3-175b")
    assert "1536x96x2048x2048 sbp [S(0), S(1)]" in out  # 6.2e11 elements, far past 2**32


@pytest.mark.long
def test_gpt3_on_8_8_16_with_2d_placements(capsys):
    check_clean(capsys, "8,8,16", "gpt3-175b")


@pytest.mark.long
def test_small_layout_every_model(capsys):
    for model in sim.MODELS:
        check_clean(capsys, "2,2,2", model, micro_batches=2)


def test_boundaries_are_sampled():
    """Both sides of every multiple of 2**31 of the attention mask's word index are compared."""
    layout = sim.parse_layout("32,8,4", 4)
    site = sim.model_sites(sim.MODELS["gpt3-175b"], layout)[0]
    points = sim.boundary_points(site, layout)
    words = 1536 * 96 * 2048 * 1024
    assert len(points) == 4 * ((words - 1) // 2 ** 31)  # two words per boundary, two halves per word
    assert {m for m, _ in points} == set(range(4))


@pytest.mark.parametrize("kind", sorted(sim.MUTATIONS))
def test_each_mutation_is_found(capsys, kind):
    code, out = run(capsys, "--layout", "32,8,4", "--model", "gpt3-175b", "--mutate", kind)
    assert code == 1, out
    finding = re.search(r"^MISMATCH (.+?): rank (\d+) \(stage, dp, tp\) = \((\d+), (\d+), (\d+)\), (.+?), first differing "
                        r"position \((.+)\) of the 1-rank draw", out, re.M)
    assert finding, out
    assert finding.group(1) in expected_sites("gpt3-175b", sim.parse_layout("32,8,4", 4))
    stage, dp, tp = (int(finding.group(i)) for i in (3, 4, 5))
    assert int(finding.group(2)) == stage * 256 + dp * 8 + tp


def test_bad_arguments(capsys):
    with pytest.raises(SystemExit) as raised:
        cli.main(["--layout", "32,8", "--model", "gpt3-175b"])
    assert raised.value.code == 2
    assert "--layout '32,8'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["--layout", "2,2,2", "--site", "x:mask@0.1:4x4:S2,B"])
    assert "--site" in capsys.readouterr().err


def test_a_site_given_directly(capsys):
    code, out = run(capsys, "--layout", "4,2,1", "--site", "probs:mask@0.1:64x16x64x64:S0,S1:rows",
                    "--site", "w:values:100x30:B,S1")
    assert code == 0 and len(site_lines(out)) == 2, out
