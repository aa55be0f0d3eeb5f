"""Figures a reader understands (glidein_ext.sim.experiments.plots): no legend over data, the
papers' values under the paper's name, grid-scale's thresholds labelled and its bars valued."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from glidein_ext.sim.experiments import delgado2014, gridscale, hasham2011, plots
from glidein_ext.sim.experiments.plots import Panel, Reference
from glidein_ext.sim.gridscale import ARCHITECTURES, CALL_COSTS

pytest.importorskip("matplotlib")


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The figures the plots save (drawn, then saved as usual)."""
    saved: list[Any] = []
    real = plots.save

    def keep(fig: Any, path: Path) -> Path:
        fig.canvas.draw()
        legends_clear_of_axes(fig)  # as drawn, before the figure is closed
        saved.append(fig)
        return real(fig, path)

    monkeypatch.setattr(plots, "save", keep)
    monkeypatch.setattr(gridscale, "save", keep)
    return saved


def legends_clear_of_axes(fig: Any) -> None:
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        legend = ax.get_legend()
        assert legend is not None
        box, area = legend.get_window_extent(renderer), ax.get_window_extent(renderer)
        assert box.x0 >= area.x1, "the legend lies over the plotting area"


def test_bars_and_timelines_keep_their_legends_outside_the_axes(
    figures: list[Any], tmp_path: Path
) -> None:
    ref = [Reference("Delgado Peris 2014: ~12", 12.0)]
    series = {f"s{i}": ([10.0, 12.0, None], [1.0, 0.5, None]) for i in range(6)}
    plots.bars(tmp_path / "b.png", "t", "y", ["a", "b", "c"], series, ref, values=True)
    panel = Panel("y", {"one": ([0.0, 1.0, 2.0], [1.0, 3.0, 2.0])}, ref)
    plots.timeline(tmp_path / "t.png", "t", [panel, panel])
    assert len(figures) == 2
    # valued bars: each mean written on its bar, "none" where there is no value
    texts = {t.get_text() for t in figures[0].axes[0].texts}
    assert {"10", "12", "none"} <= texts
    assert (tmp_path / "b.png").stat().st_size > 0 and (tmp_path / "t.png").stat().st_size > 0


def test_grid_scales_thresholds_are_labelled_and_its_bars_valued(
    figures: list[Any], tmp_path: Path
) -> None:
    needed = [
        {"cost": cost, "architecture": arch, "instances": 4 if arch != "pre-dht" else None}
        for cost in CALL_COSTS
        for arch in ARCHITECTURES
    ]
    grid = [
        {
            "cost": cost,
            "architecture": arch,
            "instances": n,
            "first_burst": 100.0 / n,
            "delay_median": 2.0 / n,
        }
        for cost in CALL_COSTS
        for arch in ARCHITECTURES
        for n in (1, 2, 4, 8)
    ]
    gridscale._figures(tmp_path, needed, grid)
    instances, curves = figures
    assert "none" in {t.get_text() for t in instances.axes[0].texts}
    assert "4" in {t.get_text() for t in instances.axes[0].texts}
    for ax in curves.axes:
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        written = [t.get_text() for t in ax.texts]
        assert any(label.startswith("target: ") for label in labels), labels
        assert any(text.startswith("target: ") for text in written), written
        # a colour per cost, a line style per architecture: coinciding curves stay told apart
        drawn = {line.get_label(): line for line in ax.get_lines() if ", " in line.get_label()}
        assert len(drawn) == len(CALL_COSTS) * len(ARCHITECTURES)
        for cost in CALL_COSTS:
            assert len({drawn[f"{arch}, {cost}"].get_color() for arch in ARCHITECTURES}) == 1
            styles = {drawn[f"{arch}, {cost}"].get_linestyle() for arch in ARCHITECTURES}
            assert len(styles) == len(ARCHITECTURES)
        for arch in ARCHITECTURES:
            assert len({drawn[f"{arch}, {cost}"].get_color() for cost in CALL_COSTS}) == len(
                CALL_COSTS
            )


def test_the_papers_values_carry_the_papers_names() -> None:
    assert not [name for name in delgado2014.SERIES if "seed" in name]
    assert [n for n in delgado2014.SERIES if n.endswith("(Delgado Peris 2014 design)")]
    for refs in delgado2014.PAPER.values():
        assert all(ref.label.startswith("Delgado Peris 2014: ") for ref in refs)
    source = Path(hasham2011.__file__).read_text()
    assert '"seed: ' not in source and 'Reference("Hasham 2011: ' in source


def test_the_stage_in_bars_are_valued_the_cached_ones_too_short_to_see(
    figures: list[Any], tmp_path: Path
) -> None:
    summary = [
        {
            "workflow": workflow,
            "condition": condition,
            "scheme": scheme,
            "stage_in_mean": 0.9 if scheme == "C1" else 150.0,
            "stage_in_mean_sem": 0.0,
            "turnaround": 2000.0,
            "turnaround_sem": 10.0,
        }
        for workflow in hasham2011.WORKFLOWS
        for condition in hasham2011.CONDITIONS
        for scheme in ("C1", "none")
    ]
    hasham2011.storage_figures(summary, tmp_path)
    fig8, fig9, fig10, fig11 = figures
    for stage_in in (fig8, fig10):
        assert {"0.9", "150"} <= {t.get_text() for t in stage_in.axes[0].texts}
    assert not fig9.axes[0].texts and not fig11.axes[0].texts
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "fig10_stage_in.png",
        "fig11_turnaround.png",
        "fig8_stage_in.png",
        "fig9_turnaround.png",
    ]
