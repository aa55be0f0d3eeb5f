"""The figures: grouped bars with error bars (the papers' per-architecture, per-size plots), time
series (Delgado Peris 2014 figures 5 and 6, Hasham 2011 figure 7), and the values the papers state
drawn beside ours as dashed lines, each labelled with the paper's name.  Every legend stands
outside its axes, to their right (``legend_outside``): it never hides data.  matplotlib with the
Agg backend, small PNGs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DPI = 80


@dataclass(frozen=True)
class Reference:
    """A value a paper states: drawn as a dashed line, labelled."""

    label: str
    value: float
    color: str = "black"


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def legend_outside(ax: Any, fontsize: int = 7, **options: Any) -> None:
    """The axes' legend to the right of them, outside the plotting area (saved with
    ``bbox_inches="tight"``, which widens the image to hold it; left out of ``tight_layout``,
    which would otherwise narrow the axes to make room)."""
    legend = ax.legend(
        fontsize=fontsize,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        borderaxespad=0.0,
        frameon=False,
        **options,
    )
    legend.set_in_layout(False)  # tight_layout keeps the axes' width; the saved image grows


def save(fig: Any, path: Path) -> Path:
    """Save the figure with room for the legends outside the axes, and close it."""
    plt = _pyplot()
    path.parent.mkdir(parents=True, exist_ok=True)
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    fig.savefig(path, dpi=DPI, bbox_inches="tight", bbox_extra_artists=legends)
    plt.close(fig)
    return path


def bars(
    path: Path,
    title: str,
    ylabel: str,
    categories: Sequence[str],
    series: Mapping[str, tuple[Sequence[float | None], Sequence[float | None]]],
    references: Sequence[Reference] = (),
    log: bool = False,
    values: bool = False,
) -> Path:
    """One group of bars per category, one bar per series (mean, error bar = sem); with
    ``values``, each bar's value written on it ("none" where there is none)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    width = 0.8 / max(1, len(series))
    for index, (name, (means, sems)) in enumerate(series.items()):
        xs = [c + (index - (len(series) - 1) / 2) * width for c in range(len(categories))]
        heights = [m if m is not None else 0.0 for m in means]
        errors = [s if s is not None else 0.0 for s in sems]
        drawn = ax.bar(xs, heights, width, yerr=errors, capsize=2, label=name)
        if values:
            labels = ["none" if m is None else f"{m:,.3g}" for m in means]
            ax.bar_label(drawn, labels=labels, fontsize=7, padding=1)
            for x, m in zip(xs, means, strict=True):
                if m is None:  # no bar to write on: at the axis
                    ax.annotate(
                        "none",
                        (x, 0),
                        xycoords=("data", "axes fraction"),
                        ha="center",
                        va="bottom",
                        fontsize=7,
                    )
    for ref in references:
        ax.axhline(ref.value, linestyle="--", linewidth=1, color=ref.color, label=ref.label)
    ax.set_xticks(range(len(categories)))
    ax.set_xticklabels(categories, fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    if log:
        ax.set_yscale("log")
    legend_outside(ax)
    fig.tight_layout()
    return save(fig, path)


@dataclass(frozen=True)
class Panel:
    """One plot of a time series figure: lines of (x, y) points, step-drawn or not."""

    ylabel: str
    lines: Mapping[str, tuple[Sequence[float], Sequence[float]]]
    references: Sequence[Reference] = ()
    steps: bool = True
    log: bool = False


def timeline(path: Path, title: str, panels: Sequence[Panel], xlabel: str = "time (s)") -> Path:
    plt = _pyplot()
    fig, axes = plt.subplots(len(panels), 1, figsize=(7.5, 2.6 * len(panels)), squeeze=False)
    for ax, panel in zip(axes[:, 0], panels, strict=True):
        for name, (xs, ys) in panel.lines.items():
            if panel.steps:
                ax.step(xs, ys, where="post", label=name, linewidth=1)
            else:
                ax.plot(xs, ys, ".", markersize=2, label=name)
        for ref in panel.references:
            ax.axvline(ref.value, linestyle="--", linewidth=1, color=ref.color, label=ref.label)
        ax.set_ylabel(panel.ylabel, fontsize=8)
        if panel.log:
            ax.set_yscale("symlog")
        legend_outside(ax)
    axes[-1, 0].set_xlabel(xlabel)
    axes[0, 0].set_title(title, fontsize=10)
    fig.tight_layout()
    return save(fig, path)


def thin(
    points: Sequence[tuple[float, float]], most: int = 2000
) -> tuple[list[float], list[float]]:
    """At most ``most`` points of a series (every n-th), as two lists."""
    step = max(1, len(points) // most)
    kept = list(points[::step])
    if points and kept[-1] != points[-1]:
        kept.append(points[-1])
    return [x for x, _ in kept], [y for _, y in kept]
