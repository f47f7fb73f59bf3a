"""difftest/readers/report.py and report_html.py: the campaign report renders from a run directory written with
the tester's own row, summary and fixture writers, holds the input's numbers, loads nothing from the network, and
reads in a browser (headless Chromium screenshot where Chromium is installed)."""

import base64
import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from types import SimpleNamespace

import pytest

from difftest.checking import impl_spec, interface
from difftest.checking.check import Result
from difftest.model import generate, presets
from difftest.model.case import CONFIGS, Case, MoEConfig, QuantConfig, RoutingConfig
from difftest.readers import report, report_html
from difftest.running import campaign
from difftest.store import fixtures, rundir

pytest.importorskip("matplotlib", reason="the report's plots need matplotlib (extra 'report')")

GROUPED = RoutingConfig("deepseek_v3", num_tokens=4, num_experts=16, top_k=4, n_group=4, topk_group=2)
ROUTING = RoutingConfig("renormalize", num_tokens=3, num_experts=8, top_k=2)
QUANT = QuantConfig("fp8_group", num_tokens=2, hidden_size=256)
MOE = MoEConfig(RoutingConfig("renormalize", num_tokens=3, num_experts=4, top_k=2), 32, 32)
MOE_WIDER = MoEConfig(RoutingConfig("renormalize", num_tokens=3, num_experts=4, top_k=2), 64, 32)
MOE_RELU2 = MoEConfig(RoutingConfig("renormalize", num_tokens=5, num_experts=4, top_k=2), 64, 32,
                      activation="relu2")
FAKE = SimpleNamespace(name="fake_gpu", version="0.0")  # a second implementation, recorded only

# (worker, implementation, case, result): every status and the edge ratios (0, inf) appear.
FAIL_MESSAGE = "out[1, 3]=0.5 but spec=0.49 (3.5x) [moe, torch]"
def passed(ratio, seconds, spec_seconds):
    return Result("pass", ratio, "", seconds=seconds, spec_seconds=spec_seconds)


RUN = [
    (0, "torch", Case("routing", GROUPED, "normal", 1), passed(0.0, 1e-3, 2e-3)),
    (0, "torch", Case("routing", GROUPED, "near_ties", 2), passed(0.01, 2e-3, 2e-3)),
    (0, "torch", Case("routing", ROUTING, "large", 3), passed(0.2, 4e-3, 1e-3)),
    (0, "torch", Case("quant", QUANT, "zero_group", 4), passed(0.05, 3e-3, 1e-3)),
    (0, "torch", Case("quant", QUANT, "normal", 5), Result("skip", 0.0, "torch: layout col_tma needs CUDA")),
    (0, "torch", Case("moe", MOE_WIDER, "normal", 6, weight_seed=5), passed(0.3, 0.02, 0.05)),  # fixed weights
    (0, "torch", Case("moe", MOE, "normal", 7),
     Result("fail", 3.5, FAIL_MESSAGE, seconds=0.03, spec_seconds=0.05)),
    (1, "fake_gpu", Case("routing", ROUTING, "exact_ties", 8),
     Result("error", float("inf"), "fake_gpu raised RuntimeError: boom")),
    (1, "fake_gpu", Case("routing", ROUTING, "normal", 9), Result("skip", 0.0, "fake_gpu needs sm90")),
    (1, "fake_gpu", Case("routing", ROUTING, "normal", 10), Result("skip", 0.0, "fake_gpu needs sm90")),
    (1, "fake_gpu", Case("moe", MOE_RELU2, "tiny", 11), passed(0.7, 0.01, 0.04)),
]
WALL_SECONDS = 2.0
SECTION_IDS = [sid for sid, _ in report_html.SECTIONS]


def write_run(out):
    """A run directory as `python -m difftest fuzz --out` writes it: worker part files merged by summarize,
    the failing torch case as a real fixture, summary.json with the fields cmd_fuzz adds."""
    out.mkdir()
    recorders = {w: campaign.jsonl_recorder(out / f"cases-{w}.jsonl") for w in (0, 1)}
    for w, impl, case, result in RUN:
        recorders[w](campaign.case_row(impl, case, result))
    for r in recorders.values():
        r.close()
    torch_impl = interface.load("torch")
    _, _, case, result = RUN[6]
    recipe = torch_impl.recipe(case)
    path = fixtures.write(out / "fixtures", case, "torch", torch_impl, recipe,
                          {"status": result.status, "ratio": result.ratio, "message": result.message},
                          impl_spec.expected(case, generate.inputs(case), recipe))
    summary = rundir.summarize(out)
    # the replay line as cli writes it, from a deep run directory: one long unbreakable word the page must wrap
    deep = "/".join(["campaigns-of-a-long-named-gpu-host"] * 8)
    finding = {"impl": "torch", "op": "moe", "fixture": str(path),
               "message": f"{result.message}\nreplay: python -m difftest replay /{deep}/fixtures/{path.name}"}
    summary.update({"seconds": WALL_SECONDS, "workers": 2, "impls": ["torch", "fake_gpu"],
                    "ops": ["routing", "quant", "moe"], "model": None, "seed": 0, "worker_errors": [],
                    "findings": [finding]})
    (out / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    return out


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    run_dir = write_run(tmp_path_factory.mktemp("report") / "run")
    assert report.main([str(run_dir), "--top", "5"]) == 0
    rep = json.loads((run_dir / "report.json").read_text())
    return run_dir, rep, (run_dir / "report.html").read_text()


def test_report_json_holds_the_input_numbers(rendered):
    run_dir, rep, _ = rendered
    rows = [json.loads(line) for line in rundir.read_lines(run_dir)]
    assert rep["totals"]["cases"] == len(RUN) == len(rows)
    assert rep["totals"]["status"] == dict(Counter(r.status for *_, r in RUN)), rep["totals"]
    per_op = Counter()
    for c in rep["counts"]:
        per_op[c["op"]] += c["total"]
    assert per_op == Counter(case.op for _, _, case, _ in RUN)
    assert rep["totals"]["max_ratio"] == 3.5 and rep["totals"]["max_ratio_impl"] == "torch"
    assert rep["skips"][0] == {"impl": "fake_gpu", "op": "routing", "reason": "fake_gpu needs sm90",
                               "count": 2}
    assert rep["ratios"]["impls"]["torch"]["max"] == 3.5
    assert rep["ratios"]["impls"]["fake_gpu"]["non_finite"] == 1
    for impl, st in rep["ratios"]["impls"].items():
        positive = sum(1 for _, i, _, r in RUN if i == impl and r.status != "skip"
                       and 0 < r.ratio < float("inf"))
        assert sum(map(sum, st["hist"].values())) == positive, impl
    assert rep["timing"]["rate"] == len(RUN) / WALL_SECONDS
    assert rep["timing"]["per_op"]["moe"]["impl_seconds"] == pytest.approx(0.06)


def test_coverage_marks_values_never_hit(rendered):
    _, rep, _ = rendered
    activation = rep["coverage"]["moe"]["activation"]
    assert activation["impls"] == ["fake_gpu", "torch"]
    assert ["relu2", 1, 0] in activation["rows"] and ["swiglu", 0, 2] in activation["rows"]
    assert ["relu2", "torch"] in activation["zero"] and ["swiglu", "fake_gpu"] in activation["zero"]
    methods = dict((r[0], r[1:]) for r in rep["coverage"]["routing"]["routing method"]["rows"])
    assert methods["deepseek_v3"] == [0, 2] and methods["renormalize"] == [1, 1]  # skips are not coverage
    tokens = rep["coverage"]["routing"]["tokens"]
    assert (tokens["min"], tokens["max"]) == (3, 4) and ["2–3", 1, 1] in tokens["rows"]


def test_worst_cases_link_their_fixtures(rendered):
    run_dir, rep, page = rendered
    assert len(rep["worst"]) == 5
    first, second = rep["worst"][:2]
    assert (first["impl"], first["status"], first["ratio"]) == ("fake_gpu", "error", None)
    assert (second["ratio"], second["fixture"]) == (3.5, rep["findings"][0]["fixture"])
    assert not second["fixture"].startswith("/") and (run_dir / second["fixture"] / "case.json").is_file()
    assert f'href="{second["fixture"]}"' in page
    fixed = [w for w in rep["worst"] if w["weight_seed"] is not None]
    assert [(w["seed"], w["weight_seed"]) for w in fixed] == [(6, 5)] and "<td>6 (weights 5)</td>" in page


def test_html_is_self_contained(rendered):
    _, _, page = rendered
    for sid in SECTION_IDS:
        assert f'<section id="{sid}">' in page, sid
    images = re.findall(r'<img[^>]* src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == 2 and all(base64.b64decode(b)[:8] == b"\x89PNG\r\n\x1a\n" for b in images)
    remote = re.findall(r'(?:src|href|action)\s*=\s*["\']?\s*(?:[a-z][a-z0-9+.-]*:)?//', page, re.I)
    assert not remote, remote
    assert not re.search(r"@import|url\(|<script|<link|<iframe|<object", page, re.I)
    assert "3.5" in page and "fake_gpu needs sm90" in page and '<td class="zero n">0</td>' in page


@pytest.mark.parametrize("breakage, message", [
    ("no directory", "no such run directory"),
    ("no cases", "no cases.jsonl"),
    ("corrupt line", "cases.jsonl:2: not a JSON line"),
    ("row without status", "cases.jsonl:1: a case row needs string fields"),
    ("corrupt summary", "summary.json: not valid JSON"),
])
def test_bad_run_directory_is_a_one_line_error(tmp_path, capsys, breakage, message):
    run_dir = tmp_path / "run"
    row = json.dumps(campaign.case_row(*RUN[2][1:]))
    if breakage != "no directory":
        run_dir.mkdir()
    if breakage == "corrupt line":
        (run_dir / "cases.jsonl").write_text(row + "\n{not json\n")
    if breakage == "row without status":
        (run_dir / "cases.jsonl").write_text(json.dumps({"op": "routing", "impl": "torch"}) + "\n")
    if breakage == "corrupt summary":
        (run_dir / "cases.jsonl").write_text(row + "\n")
        (run_dir / "summary.json").write_text('{"cases": ')
    assert report.main([str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("difftest: error: ") and message in err and err.count("\n") == 1, err
    assert not (run_dir / "report.html").exists()


def test_unfinished_run_renders_from_worker_parts(tmp_path):
    """A killed campaign: no merge, no summary.json, a torn last line in a part file."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    rows = [json.dumps(campaign.case_row(i, c, r)) for _, i, c, r in RUN[:4]]
    (run_dir / "cases-0.jsonl").write_text("\n".join(rows) + '\n{"impl": "torch", "op": "rou')
    page = report.render(run_dir).read_text()
    rep = json.loads((run_dir / "report.json").read_text())
    assert rep["totals"]["cases"] == 4 and rep["timing"]["rate"] is None
    assert any("no summary.json" in n for n in rep["notes"]) and any("part files" in n for n in rep["notes"])
    assert report.NOT_RECORDED in page


def test_maybe_render_without_matplotlib_says_how_to_render_later(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "cases.jsonl").write_text(json.dumps(campaign.case_row(*RUN[0][1:])) + "\n")
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` raise ImportError
        message = report.maybe_render(run_dir)
    assert f"python -m difftest report {run_dir}" in message and "matplotlib is not installed" in message
    assert not (run_dir / "report.html").exists()
    assert report.maybe_render(run_dir) == f"report: {run_dir / 'report.html'}"
    assert (run_dir / "report.html").is_file()


def test_ratio_axis_is_clipped_and_exact_zeros_are_counted_apart():
    """A case at 1e-250 once stretched the axis over 250 decades, so all real data was one spike."""
    config = RoutingConfig("topk", 2, 8, 2)
    rows = [campaign.case_row("torch", Case("routing", config, "normal", i), passed(r, 0.0, 0.0))
            for i, r in enumerate([0.0, 0.0, 1e-250, 0.02, 0.5, 1.0])]
    rows.append(campaign.case_row("torch", Case("routing", config, "normal", 9), Result("fail", 1e9, "x")))
    st = report.ratios(rows)
    lo, hi = st["edges"][0], st["edges"][-1]
    assert report.RATIO_AXIS[0] <= lo < 0.02 and 1.0 < hi <= report.RATIO_AXIS[1], (lo, hi)
    t = st["impls"]["torch"]
    assert (t["zero"], t["below_axis"], t["above_axis"]) == (2, 1, 1)
    hist = t["hist"]["routing"]
    assert sum(hist) == 5 and hist[0] == 1 and hist[-1] == 1  # the clipped ones sit in the end bins
    at_one = st["edges"].index(1.0)
    assert hist[at_one - 1] == 1 and sum(hist[at_one:-1]) == 0  # exactly 1 passes: left of the failure line


def test_failures_without_a_ratio_are_the_headline_and_plotted():
    """Bit-exact codes, wrong ids and exceptions fail without a finite ratio: the headline once read "max
    error/bound ratio 0" next to hundreds of failures, over a plot that drew none of them."""
    quant, routing = Case("quant", QUANT, "normal", 0), Case("routing", ROUTING, "normal", 1)
    rows = [campaign.case_row("k", replace_seed(quant, i), Result("fail", float("inf"), "q[0, 0]=0x7e but spec=0x76",
                                                                  failures=(("q", "mismatch"),))) for i in range(3)]
    rows += [campaign.case_row("k", routing, Result("error", float("inf"), "k raised ValueError: x")),
             campaign.case_row("k", replace_seed(quant, 9), passed(0.0, 0.0, 0.0))]
    rep = report.build(rows, {}, {})
    assert rep["totals"]["max_ratio"] == 0.0
    assert rep["totals"]["no_ratio"] == [{"impl": "k", "op": "quant", "cases": 3}, {"impl": "k", "op": "routing",
                                                                                      "cases": 1}]
    totals = report_html._section_totals(rep)
    assert ("∞: 4 failing cases without a finite ratio (wrong ids or codes, an exception, a crash); the largest "
            "finite ratio is 0") in totals, totals
    assert "∞: k / quant (3), k / routing (1); largest finite: k / quant" in totals, totals
    assert rep["ratios"]["impls"]["k"]["no_ratio"] == {"quant": 3, "routing": 1}
    assert report_html.plot_ratios(rep)  # draws them, in the bin right of the axis


def replace_seed(case, seed):
    return Case(case.op, case.config, case.dist, seed)


def test_worst_cases_list_a_configuration_once_with_a_message():
    """Shrinking and targeting draw one configuration again and again: it was listed up to 4 times, its
    message column empty."""
    config, other = RoutingConfig("topk", 2, 8, 2), RoutingConfig("topk", 3, 8, 2)
    rows = [campaign.case_row("torch", Case("routing", config, d, s), passed(r, 0.0, 0.0))
            for d, s, r in (("normal", 1, 0.9), ("large", 2, 0.95), ("tiny", 3, 0.5))]
    rows += [campaign.case_row("torch", Case("routing", other, "normal", 4), passed(1.0, 0.0, 0.0)),
             campaign.case_row("torch", Case("routing", other, "normal", 5), passed(0.0, 0.0, 0.0))]
    worst = report.worst(rows, {}, top=10)
    assert [(w["ratio"], w["cases"], w["seed"]) for w in worst] == [(1.0, 2, 4), (0.95, 3, 2)]
    assert worst[0]["message"] == "exactly at the derived bound"
    assert worst[1]["message"] == "within the derived bound: largest error 0.95 of it"
    assert report_html._config_text(worst[0]) == "method=topk num_tokens=3 num_experts=8 top_k=2 logits_dtype=fp32"


def test_coverage_greys_what_the_run_did_not_draw_from():
    """With --model, other methods were red though the run could never draw them; hidden sizes 1-15, which
    no strategy draws, had cells at all; NaN inputs without --special were red."""
    rows = [campaign.case_row("torch", Case("routing", RoutingConfig("deepseek_v3", 3, 256, 8, 8, 4), "normal",
                                            1), passed(0.1, 0.0, 0.0)),
            campaign.case_row("torch", Case("quant", QUANT, "normal", 2), passed(0.0, 0.0, 0.0)),
            campaign.case_row("torch", Case("moe", MOE, "normal", 3), passed(0.0, 0.0, 0.0))]
    cov = report.coverage(rows, {"model": "deepseek-v3", "where": {"num_tokens": {"lo": 1, "hi": 3}},
                                 "special": False})
    methods = cov["routing"]["routing method"]
    assert methods["zero"] == [] and ["topk", "torch"] in methods["excluded"]
    assert ["deepseek_v3", 1] in methods["rows"]
    experts = cov["routing"]["experts"]
    assert experts["zero"] == [] and ["128–255", "torch"] in experts["excluded"]
    tokens = cov["routing"]["tokens"]
    assert ["0", "torch"] in tokens["excluded"] and tokens["zero"] == [["1", "torch"]]  # 1..3: 1 not hit
    hidden = cov["quant"]["hidden size"]
    assert [r[0] for r in hidden["rows"]] == ["16–31", "32–63", "64–127", "128–255", "256–511"]
    assert hidden["zero"] == [] and len(hidden["excluded"]) == 4  # the preset's quantizer is 256 wide
    assert ["nonfinite", "torch"] in cov["quant"]["input distribution"]["excluded"]
    assert [r[0] for r in cov["moe"]["hidden dtype"]["rows"]] == ["bf16", "fp16"]  # fp16: the default strategies'
    assert ["fp16", "torch"] in cov["moe"]["hidden dtype"]["excluded"]  # ... but not the preset's
    plain = report.coverage(rows, {})  # no filters recorded: every drawable value never hit is a gap
    assert ["topk", "torch"] in plain["routing"]["routing method"]["zero"]
    assert plain["routing"]["routing method"]["excluded"] == []


def test_a_plugin_space_and_where_values_outside_the_strategies_show():
    rows = [campaign.case_row("mine", Case("moe", MoEConfig(MOE.routing, 32, 32, hidden_dtype="fp16"), "normal",
                                           1), passed(0.0, 0.0, 0.0))]
    cov = report.coverage(rows, {"where": {"hidden_dtype": {"values": ["fp16"]}},
                                 "spaces": {"mine": {"method": {"values": ["renormalize"]}}}})
    assert cov["moe"]["hidden dtype"]["rows"] == [["bf16", 0], ["fp16", 1]]
    assert cov["moe"]["hidden dtype"]["excluded"] == [["bf16", "mine"]]
    assert ["topk", "mine"] in cov["moe"]["routing method"]["excluded"]


def test_timing_has_one_panel_per_op(rendered):
    _, rep, _ = rendered

    def png_height(b64):
        return int.from_bytes(base64.b64decode(b64)[20:24], "big")  # the IHDR chunk's height

    one = json.loads(json.dumps(rep))
    one["timing"]["per_op"] = {"routing": rep["timing"]["per_op"]["routing"]}
    assert len([s for s in rep["timing"]["per_op"].values() if s["hist"]]) == 3
    assert png_height(report_html.plot_timing(rep)) > 2 * png_height(report_html.plot_timing(one))


@pytest.mark.parametrize("op", ["routing", "quant", "moe", "trtllm_ops"])
def test_every_value_the_strategies_draw_has_a_coverage_cell(op):
    """The coverage axes list what the strategies draw; a strategy drawing outside them would be a value the
    page could show only as an afterthought, and a shape below an axis' floor no cell at all."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from difftest.model import strategies

    domains = {name: set(values) for _, ops, name, values in report.ENUM_AXES if op in ops}
    floors = {name: (b[op] if isinstance(b, dict) else b) for _, ops, name, b in report.SHAPE_AXES if op in ops}

    @settings(max_examples=300, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.one_of([configs for _, configs in strategies.slices(op)]))
    def check(config):
        row = {"case": {"config": json.loads(json.dumps(config.__dict__, default=lambda o: o.__dict__))}}
        for name, values in domains.items():
            assert str(report._field(row, name) or "none") in values, (name, report._field(row, name))
        for name, floor in floors.items():
            assert report._field(row, name) >= floor, (name, report._field(row, name))

    check()
    assert strategies.SPECIAL_DISTS  # the input-distribution axis greys these unless --special


@pytest.mark.parametrize("name", sorted(presets.PRESETS))
def test_presets_draw_inside_their_declared_space(name):
    """presets.space (what the report greys around --model) must hold everything the preset draws."""
    from dataclasses import asdict

    from hypothesis import HealthCheck, given, settings

    def inside(space):
        @settings(max_examples=40, database=None, deadline=None, suppress_health_check=list(HealthCheck))
        @given(configs)
        def check(config):
            assert isinstance(config, CONFIGS[op]), (op, type(config))
            flat = asdict(config)
            flat.update(flat.pop("routing", None) or {})
            for field, c in space.items():
                assert c.allows(flat[field]), (field, flat[field], c)

        return check

    for op in CONFIGS:  # every op: a preset that drew the wrong config kind broke `fuzz --model` on trtllm_ops
        configs, space = presets.configs(name, op), presets.space(name, op)
        if configs is None:
            assert space == {}
            continue
        inside(space)()


def _chromium():
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


SCREENSHOT_WIDTH = 1400


def screenshot(html, png, profile, height):
    """The page in headless Chromium at SCREENSHOT_WIDTH pixels (docs/cli.md, "The report", has the command)."""
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--hide-scrollbars",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", f"--screenshot={png}", f"--window-size={SCREENSHOT_WIDTH},{height}"]
    subprocess.run([_chromium(), *flags, html.as_uri()], capture_output=True, timeout=120, check=True)


@pytest.mark.skipif(_chromium() is None, reason="no chromium/chrome on PATH for the headless screenshot")
def test_headless_screenshot_is_a_readable_page_that_fits_1400_px(rendered, tmp_path):
    import matplotlib.image

    run_dir, _, _ = rendered
    png = tmp_path / "report.png"
    screenshot(run_dir / "report.html", png, tmp_path / "profile", 4000)
    pixels = matplotlib.image.imread(png)[..., :3]
    assert pixels.shape[:2] == (4000, SCREENSHOT_WIDTH) and png.stat().st_size > 30_000
    ink = (pixels < 0.9).any(axis=-1)
    assert 0.02 < ink.mean() < 0.6, f"{ink.mean():.1%} of the page is non-white: blank or unstyled"
    # the body is at most 1200 px wide and centred: nothing (a long finding, a wide table) may run past it
    right_margin = ink[:, (SCREENSHOT_WIDTH + 1200) // 2 + 40:]
    assert not right_margin.any(), f"{right_margin.sum()} pixels past the page's right edge: a table overflows"

    def cells(rgb):
        return (abs(pixels - [c / 255 for c in rgb]) < 0.02).all(axis=-1).sum()

    assert cells((249, 201, 201)) > 500, "no zero-coverage (red) cells drawn: the page's CSS did not apply"
    assert cells((228, 228, 228)) > 500, "no excluded (grey) coverage cells drawn"
