"""`fairtui plot`: each kind drawn to PNG and SVG on the CPU, checked through matplotlib's objects (what was
drawn: bars, lines, labels, the worst class), never by pixels; the result-identity rules of export."""

import dataclasses
import json
import shutil
import statistics
import sys

import pytest

pytest.importorskip("matplotlib")

from matplotlib.container import BarContainer  # noqa: E402

from engine.contract.config import Profile  # noqa: E402
from fairtui.figures import PlotError, figure_format, require_matplotlib  # noqa: E402
from fairtui.figures.draw import WORST_HATCH, to_bytes  # noqa: E402
from fairtui.figures.make import PlotRequest, build  # noqa: E402
from fairtui.runs.runfolder import RunView  # noqa: E402
from fairtui.runs.synthetic import make_run  # noqa: E402
from tests.conftest import fairtui_cmd  # noqa: E402
from tests.fairtui.test_app import DATA  # noqa: E402


def view(home, run_id, **kw) -> RunView:
    return RunView.load(make_run(home, run_id, **kw))


@pytest.fixture
def three(tmp_path):
    """Two seeds of one profile (one series) and a second method (another)."""
    home = tmp_path / "home"
    a0 = view(home, "20260101-000000-aaaa00", name="at", method="at", seed=0, profile=Profile(name="at", seed=0))
    a1 = view(home, "20260101-000001-aaaa01", name="at", method="at", seed=1, profile=Profile(name="at", seed=1))
    c0 = view(home, "20260101-000002-cccc00", name="cfa", method="cfa", seed=0, robust_centre=0.6,
              profile=Profile(name="cfa", seed=0))
    return home, [a0, a1, c0]


def bar_groups(ax) -> list[BarContainer]:
    return [c for c in ax.containers if isinstance(c, BarContainer)]


def rendered(fig) -> None:
    assert to_bytes(fig, "png").startswith(b"\x89PNG")
    assert b"<svg" in to_bytes(fig, "svg")


def test_classes_draws_one_bar_per_class_and_series_with_each_worst_class_hatched(three):
    _, views = three
    fig = build(PlotRequest("classes"), views)
    rendered(fig)
    (ax,) = fig.axes
    groups = bar_groups(ax)
    assert len(groups) == 2  # the two seeds of "at" are one series
    assert all(len(g.patches) == 10 for g in groups)
    assert [t.get_text() for t in ax.get_xticklabels()] == [f"c{i}" for i in range(10)]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == ["at (seeds 0, 1)", "cfa"]
    # the bars are the mean over seeds, in percent; the worst class (lowest mean) is the hatched one
    at = [v.results()[("test", "best", "pgd20")]["robust_acc_per_class"] for v in views[:2]]
    means = [100 * statistics.mean(pair) for pair in zip(*at)]
    assert [p.get_height() for p in groups[0].patches] == pytest.approx(means)
    hatched = [i for i, p in enumerate(groups[0].patches) if p.get_hatch() == WORST_HATCH]
    assert hatched == [means.index(min(means))]
    cfa = views[2].results()[("test", "best", "pgd20")]["robust_acc_per_class"]
    assert [i for i, p in enumerate(groups[1].patches) if p.get_hatch()] == [cfa.index(min(cfa))]
    caption = fig._suptitle.get_text().replace("\n", " ")
    assert "pgd20, eps 8/255, whole split @ best" in caption and "mean ± std over seeds" in caption


def test_classes_with_clean_draws_the_clean_bars_above_the_robust(three):
    _, views = three
    fig = build(PlotRequest("classes", clean=True), views)
    clean_ax, robust_ax = fig.axes
    assert clean_ax.get_ylabel().startswith("clean") and robust_ax.get_ylabel().startswith("robust")
    assert len(bar_groups(clean_ax)) == len(bar_groups(robust_ax)) == 2
    assert not any(p.get_hatch() for g in bar_groups(clean_ax) for p in g.patches)
    rendered(fig)


def test_a_figure_of_runs_at_different_eps_names_each_setting(tmp_path):
    home = tmp_path / "home"
    base = Profile(name="wide", seed=0)
    wide = dataclasses.replace(base, attack=dataclasses.replace(base.attack, eps=0.1))
    views = [view(home, "20260101-000000-aaaa00", name="at", profile=Profile(name="at")),
             view(home, "20260101-000001-bbbb00", name="wide", profile=wide)]
    for kind in ("classes", "tradeoff"):
        fig = build(PlotRequest(kind), views)
        legend = [t.get_text() for t in fig.legends[0].get_texts()]
        assert "eps 8/255" in legend[0] and "eps 0.1," in legend[1]
        assert "settings differ" in fig._suptitle.get_text().replace("\n", " ")


def test_runs_with_other_classes_are_refused(tmp_path):
    home = tmp_path / "home"
    views = [view(home, "20260101-000000-aaaa00", name="a", k=10), view(home, "20260101-000001-bbbb00", name="b", k=5)]
    with pytest.raises(PlotError, match="classes"):
        build(PlotRequest("classes"), views)


def test_only_headline_results_unless_the_attack_is_named(three):
    _, views = three
    with pytest.raises(PlotError, match="no aa result.*fairtui eval"):
        build(PlotRequest("classes", attack="aa"), views)
    with pytest.raises(PlotError, match="no robust result on test at 'ema'"):
        build(PlotRequest("classes", checkpoint="ema"), views)


def test_tradeoff_puts_each_series_at_its_mean_average_and_worst(three):
    _, views = three
    fig = build(PlotRequest("tradeoff"), views)
    rendered(fig)
    (ax,) = fig.axes
    points = [line for line in ax.lines if line.get_marker() == "o"]
    assert len(points) == 2
    results = [v.results()[("test", "best", "pgd20")] for v in views]
    assert points[0].get_xdata()[0] == pytest.approx(100 * statistics.mean(r["avg_robust"] for r in results[:2]))
    assert points[0].get_ydata()[0] == pytest.approx(100 * statistics.mean(min(r["robust_acc_per_class"])
                                                                           for r in results[:2]))
    assert points[1].get_ydata()[0] == pytest.approx(100 * min(results[2]["robust_acc_per_class"]))


def test_curves_one_panel_per_run_one_line_per_class_the_worst_strongest(three):
    _, views = three
    fig = build(PlotRequest("curves"), views[:2])
    rendered(fig)
    assert len([ax for ax in fig.axes if ax.get_visible()]) == 2
    ax = fig.axes[0]
    assert len(ax.lines) == 10 and list(ax.lines[0].get_xdata()) == [1, 2, 3, 4, 5]
    last = views[0].epochs[-1]["val"]["robust_acc_per_class"]
    worst = last.index(min(last))
    widths = [line.get_linewidth() for line in ax.lines]
    assert widths.index(max(widths)) == worst
    assert f"c{worst} (worst)" in [t.get_text() for t in ax.get_legend().get_texts()]
    assert "val pgd10" in ax.get_title()


def test_curves_of_many_classes_are_grey_with_the_worst_and_the_mean_in_colour(tmp_path):
    v = view(tmp_path / "home", "20260101-000000-aaaa00", k=100)
    fig = build(PlotRequest("curves"), [v])
    ax = fig.axes[0]
    assert len(ax.lines) == 101  # the classes and their mean
    assert [t.get_text() for t in ax.get_legend().get_texts()][-1] == "mean over classes"
    assert sum(1 for line in ax.lines[:100] if line.get_color() != "0.7") == 1


def test_state_draws_a_recorded_cfa_runs_margins_per_class(tmp_path):
    run_dir = tmp_path / "home" / "runs" / "20261122-000000-cfa001"
    run_dir.mkdir(parents=True)
    shutil.copy(DATA / "cfa_digits_events.jsonl", run_dir / "events.jsonl")
    shutil.copy(DATA / "cfa_digits_profile.toml", run_dir / "profile.toml")
    (run_dir / "meta.json").write_text(json.dumps({"name": "recorded-cfa"}))
    v = RunView.load(run_dir)
    fig = build(PlotRequest("state"), [v])  # the first class-wise key: CFA's eps_per_class
    rendered(fig)
    ax = fig.axes[0]
    assert ax.get_ylabel() == "eps_per_class" and len(ax.lines) == 10
    first = [e["method_state"]["eps_per_class"][3] for e in v.epochs]
    assert list(ax.lines[3].get_ydata()) == pytest.approx(first)
    with pytest.raises(PlotError, match="no class-wise state 'lambda_bndy'; it has: eps_per_class, "
                                        "train_robust_acc_per_class"):
        build(PlotRequest("state", key="lambda_bndy"), [v])
    # its robustness confusion matrix, rows in percent
    fig = build(PlotRequest("confusion"), [v])
    rendered(fig)
    counts = v.full(v.results()[("test", "best", "pgd20")])["confusion_matrix"]  # the digest keeps results slim
    shown = fig.axes[0].images[0].get_array()
    assert shown[2][5] == pytest.approx(100 * counts[2][5] / sum(counts[2]))
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == [str(i) for i in range(10)]


def test_state_of_wat_has_the_overall_weight_and_dafa_a_matrix(tmp_path):
    home = tmp_path / "home"
    wat = view(home, "20260101-000000-aaaa00", method="wat", k=3, method_state={"weights": [0.4, 0.1, 0.2, 0.3]})
    fig = build(PlotRequest("state"), [wat])
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["overall", "c0", "c1", "c2"]
    p = [[0.5, 0.3, 0.2], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6]]
    dafa = view(home, "20260101-000001-bbbb00", method="dafa", k=3, method_state={"dafa_weight": [1.0, 1.1, 0.9],
                                                                                  "adv_prob_matrix": p})
    fig = build(PlotRequest("state", key="adv_prob_matrix"), [dafa])
    assert fig.axes[0].images[0].get_array().tolist() == p
    rendered(fig)


def test_a_result_without_a_confusion_matrix_says_how_to_measure_it(tmp_path):
    v = view(tmp_path / "home", "20260101-000000-aaaa00")
    lines = (v.run_dir / "events.jsonl").read_text().splitlines()
    stripped = [json.dumps({k: val for k, val in json.loads(line).items() if k != "confusion_matrix"}) for line in lines]
    (v.run_dir / "events.jsonl").write_text("\n".join(stripped) + "\n")
    with pytest.raises(PlotError, match=r"no confusion matrix .*fairtui eval 20260101-000000-aaaa00 --attack pgd20"):
        build(PlotRequest("confusion"), [RunView.load(v.run_dir)])


def test_files_are_the_same_when_drawn_again(three):
    _, views = three
    for fmt in ("pdf", "svg", "png"):
        assert to_bytes(build(PlotRequest("classes"), views), fmt) == to_bytes(build(PlotRequest("classes"), views), fmt)


def test_the_suffix_chooses_the_format_and_a_missing_matplotlib_names_the_extra(monkeypatch):
    assert [figure_format(p) for p in ("a.pdf", "b.SVG", "c.png")] == ["pdf", "svg", "png"]
    with pytest.raises(PlotError, match=r"\.pdf, \.svg or \.png"):
        figure_format("fig.jpg")
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(PlotError, match=r"pip install 'fairtui\[plots\]'"):
        require_matplotlib()


def test_the_command_writes_the_figure_and_refuses_what_it_should(three, tmp_path):
    home, views = three
    out = tmp_path / "fig.pdf"
    proc = fairtui_cmd("plot", "classes", *[v.run_id for v in views], "-o", str(out), home=home)
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes().startswith(b"%PDF") and "wrote" in proc.stderr
    again = fairtui_cmd("plot", "classes", views[0].run_id, "-o", str(out), home=home)
    assert again.returncode == 2 and "exists; --force" in again.stderr
    inside = fairtui_cmd("plot", "tradeoff", views[0].run_id, "-o", str(home / "f.png"), home=home)
    assert inside.returncode == 2 and "inside the fairtui home" in inside.stderr
    jpg = fairtui_cmd("plot", "classes", views[0].run_id, "-o", str(tmp_path / "f.jpg"), home=home)
    assert jpg.returncode == 2 and ".pdf, .svg or .png" in jpg.stderr
    kind = fairtui_cmd("plot", "bars", views[0].run_id, "-o", str(tmp_path / "f.png"), home=home)
    assert kind.returncode == 2 and "choose classes, curves, state, confusion, tradeoff" in kind.stderr
    conf = fairtui_cmd("plot", "confusion", views[0].run_id, views[1].run_id, "-o", str(tmp_path / "c.png"), home=home)
    assert conf.returncode == 2 and "one result" in conf.stderr
    assert not (tmp_path / "c.png").exists()


def test_an_epoch_axis_has_whole_ticks_only():
    """After one epoch the x axis spanned 0.50 to 1.50 (#56 item 10): ticks are whole epochs, the last one
    included, at most eight."""
    from fairtui.app.widgets.plot import whole_ticks

    assert whole_ticks([1]) == [1] and whole_ticks([1, 2]) == [1, 2]
    for xs in (list(range(1, 31)), list(range(1, 16)), list(range(3, 101)), list(range(1, 229_001))):
        ticks = whole_ticks(xs)
        assert all(isinstance(t, int) for t in ticks) and len(ticks) <= 8
        assert ticks[0] == xs[0] and ticks[-1] == xs[-1] and ticks == sorted(set(ticks))


def test_export_of_a_run_measured_at_its_last_checkpoint_alone_finds_that_result(tmp_path):
    """A tuning study's best trial is tested at its last checkpoint (`tune finish`): `fairtui export RUN` found
    nothing at the default `best` (#56 item 7). It takes the last, and says so in the row's setting."""
    import json

    from tests.conftest import fairtui_cmd
    from fairtui.runs.synthetic import make_run

    home = tmp_path / "home"
    run = make_run(home, "20261127-000000-aaaaaa")
    lines = [line for line in (run / "events.jsonl").read_text().splitlines()
             if json.loads(line).get("checkpoint") != "best"]
    (run / "events.jsonl").write_text("\n".join(lines) + "\n")
    out = fairtui_cmd("export", "20261127-000000-aaaaaa", "--format", "json", home=home)
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)["rows"] if isinstance(json.loads(out.stdout), dict) else json.loads(out.stdout)
    assert row["setting"].endswith("@ last (no best-checkpoint result)")
    none = make_run(home, "20261127-000000-bbbbbb", status="stopped")  # no test result at all: still refused
    assert fairtui_cmd("export", none.name, home=home).returncode != 0
