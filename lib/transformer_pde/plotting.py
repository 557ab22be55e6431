"""The house figure style and the recurring plots of the book."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.rcsetup import cycler
from numpy.typing import ArrayLike

from . import _checks
from .fitting import PowerLawFit, fit_power_law

if TYPE_CHECKING:
    from mpl_toolkits.mplot3d.axes3d import Axes3D

__all__ = ["use_house_style", "loglog_fit", "quiver_field", "COLORS", "TEXT_WIDTH", "DPI",
           "PIXEL_RATIO"]

#: Colour cycle of the book (colour-blind safe, Okabe-Ito).
COLORS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"]


#: Width of the book's text column in inches: at :data:`DPI` a figure this wide is displayed
#: 680 px wide, its natural size in the ~690-px column of the rendered book, so a font of
#: ``p`` points is shown ``p`` points high. Draw every figure at most this wide.
TEXT_WIDTH = 6.8

#: Display resolution of the figures (CSS pixels per inch): a figure ``w`` inches wide is
#: shown ``w * DPI`` pixels wide in the notebook and in the rendered book.
DPI = 100

#: Pixels stored per displayed pixel: inline figures are PNGs drawn at ``PIXEL_RATIO * DPI``
#: pixels per inch and displayed at ``DPI`` (the notebook output carries the display width),
#: so they stay sharp on high-resolution screens and when zoomed to 200 %.
PIXEL_RATIO = 2


def use_house_style() -> None:
    """Set the book's matplotlib defaults (sizes, grid, colours, sharp PNG figures).

    Figures default to the text column's width (:data:`TEXT_WIDTH` inches, displayed at
    :data:`DPI` pixels per inch), with every text (ticks, legends, titles) at 9 points or more
    as displayed. In a notebook, inline figures become PNGs with :data:`PIXEL_RATIO` times the
    pixels of their displayed size (IPython's ``retina`` format: the output's metadata holds
    the display width, which Jupyter and the book's HTML use), and ``savefig``
    writes the same resolution. PNG rather than SVG keeps scatter plots of thousands of
    points small in the stored notebooks.

    Returns
    -------
    None

    Examples
    --------
    >>> with mpl.rc_context():  # restores the previous defaults afterwards
    ...     use_house_style()
    ...     print(mpl.rcParams["figure.dpi"] == DPI, mpl.rcParams["xtick.labelsize"] >= 9)
    True True
    """
    mpl.rcParams.update({
        "figure.figsize": (TEXT_WIDTH, 3.6),
        "figure.dpi": DPI,
        "savefig.dpi": PIXEL_RATIO * DPI,
        "figure.constrained_layout.use": True,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.prop_cycle": cycler(color=COLORS),
        "font.size": 10,
        "axes.titlesize": 10,
        "axes.labelsize": 10,
        "xtick.labelsize": 9,
        "ytick.labelsize": 9,
        "legend.fontsize": 9,
        "legend.title_fontsize": 9,
        "figure.titlesize": 11,
        "legend.frameon": False,
        "lines.markersize": 5,
        "image.cmap": "viridis",
    })
    _use_retina_inline_figures()


def _use_retina_inline_figures() -> None:
    """Inline figures as PNGs at twice the display resolution, when running under IPython.

    IPython's ``retina`` PNG with only the display *width* in the output's metadata: with the
    height too, a browser that narrows a figure to the text column would squash it.
    """
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is part of the book's environment
        return
    shell = get_ipython()
    if shell is None:  # a script or a unit test: no inline figures
        return
    from IPython.core.pylabtools import retina_figure
    from matplotlib.figure import Figure
    from matplotlib_inline.config import InlineBackend

    kwargs = dict(InlineBackend.instance().print_figure_kwargs)  # bbox_inches="tight"

    def png_2x(fig: Figure) -> tuple[str, dict[str, int]] | None:
        out = retina_figure(fig, base64=True, **kwargs)
        if out is None:  # an empty figure
            return None
        data, metadata = out
        return data, {"width": metadata["width"]}

    shell.display_formatter.formatters["image/png"].for_type(Figure, png_2x)


def loglog_fit(ax: Axes, x: ArrayLike, y: ArrayLike, *, label: str | None = None,
               color: str | None = None, marker: str = "o", fit_label: bool = True) -> PowerLawFit:
    r"""Plot ``y`` against ``x`` on log-log axes with its power-law fit; return the fit.

    The fitted line is dashed and labelled with its exponent.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        The panel to draw on.
    x, y : array (k,)
        Positive abscissae and values, :math:`y \approx C x^p`.
    label : str, optional
        Legend label of the points.
    color : str, optional
        Colour of the points and of the line; the next of the cycle by default.
    marker : str
        Matplotlib format of the points.
    fit_label : bool
        Label the line with its slope.

    Returns
    -------
    PowerLawFit
        The fit of :func:`transformer_pde.fitting.fit_power_law`.

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> fig, ax = plt.subplots()
    >>> fit = loglog_fit(ax, [1.0, 2.0, 4.0], [3.0, 12.0, 48.0])  # y = 3 x^2
    >>> round(fit.exponent, 9)
    2.0
    >>> plt.close(fig)
    """
    x, y = _checks.real_array(x, "x"), _checks.real_array(y, "y")
    fit = fit_power_law(x, y)
    if not isinstance(marker, str):
        raise ValueError(f"marker must be a matplotlib format string, got {marker!r}")
    try:
        (line,) = ax.loglog(x, y, marker, color=color, label=label)
    except ValueError as err:
        raise ValueError(f"marker {marker!r} is not a matplotlib format string, or color "
                         f"{color!r} not a colour: {err}") from None
    xs = np.geomspace(np.min(x), np.max(x), 50)
    ax.loglog(xs, fit(xs), "--", color=line.get_color(), lw=1,
              label=f"fit: slope {fit.exponent:.2f}" if fit_label else None)
    return fit


def quiver_field(ax: Axes, X: ArrayLike, velocities: ArrayLike, *, grid: ArrayLike | None = None,
                 grid_velocities: ArrayLike | None = None, title: str | None = None,
                 color: str = "C0", arrow_length: float | None = None) -> Axes:
    """Tokens as dots with their velocities as arrows; optionally the field on a grid.

    ``grid`` (m, 2) and ``grid_velocities`` (m, 2) draw the field at other points in grey.
    All arrows of the panel share one scale: the longest is ``arrow_length`` data units
    (default: a tenth of the plotted extent), so lengths are comparable within a panel.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        The panel to draw on.
    X, velocities : array (n, 2)
        Tokens and their velocities.
    grid, grid_velocities : array (m, 2), optional
        Other points and the field there, drawn in grey (both or neither).
    title : str, optional
        Title of the panel.
    color : str
        Colour of the tokens' arrows.
    arrow_length : float, optional
        Length of the longest arrow, in data units.

    Returns
    -------
    matplotlib.axes.Axes
        ``ax``.

    Raises
    ------
    ValueError
        If ``grid`` is given without ``grid_velocities``.

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> fig, ax = plt.subplots()
    >>> quiver_field(ax, [[0.0, 0.0], [1.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]]) is ax
    True
    >>> plt.close(fig)
    """
    X = _checks.matrix(_checks.points(X, "X"), "X", cols=2)
    velocities = _checks.matrix(velocities, "velocities", shape=X.shape)
    if not isinstance(color, str):
        raise ValueError(f"color must be a matplotlib colour string, got {color!r}")
    G = None if grid is None else _checks.matrix(_checks.points(grid, "grid"), "grid", cols=2)
    if G is not None and grid_velocities is None:
        raise ValueError("grid_velocities must be given with grid")
    GV = None if G is None else _checks.matrix(grid_velocities, "grid_velocities", shape=G.shape)
    points = X if G is None else np.vstack([X, G])
    vel = velocities if GV is None else np.vstack([velocities, GV])
    vmax = float(np.max(np.linalg.norm(vel, axis=1)))
    if arrow_length is None:
        arrow_length = 0.1 * float(np.max(np.ptp(points, axis=0)))
    scale = vmax / arrow_length if vmax > 0 else 1.0
    common: dict[str, Any] = {"angles": "xy", "scale_units": "xy", "scale": scale}
    if G is not None and GV is not None:
        ax.quiver(G[:, 0], G[:, 1], GV[:, 0], GV[:, 1],
                  color="0.6", width=0.004, **common)
    ax.scatter(X[:, 0], X[:, 1], s=14, color="k", zorder=3)
    ax.quiver(X[:, 0], X[:, 1], velocities[:, 0], velocities[:, 1], color=color,
              width=0.006, zorder=4, **common)
    ax.set_aspect("equal")
    if title:
        ax.set_title(title)
    return ax


def close_all() -> None:
    """Close every open figure (keeps notebook memory flat).

    Returns
    -------
    None

    Examples
    --------
    >>> fig = plt.figure()
    >>> close_all()
    >>> plt.get_fignums()
    []
    """
    plt.close("all")


def sphere_tokens(ax: Axes3D, X: ArrayLike, *, trails: ArrayLike | None = None, color: str = "C0",
                  elev: float = 20.0, azim: float = 35.0, title: str | None = None) -> Axes:
    """Tokens on the unit sphere :math:`\\mathbb S^2`, drawn on a 3-D axis.

    A light wireframe of the sphere, the tokens ``X`` (n, 3) as dots (those on the hidden
    hemisphere, as seen from the view ``elev``, ``azim`` in degrees, paler), and optionally
    their paths ``trails`` (k, n, 3) as thin lines. The axis gets an equal aspect and no
    panes, ticks or grid. ``ax`` is a 3-D axis (``projection="3d"``). Returns ``ax``.

    Parameters
    ----------
    ax : mpl_toolkits.mplot3d.axes3d.Axes3D
        A 3-D panel.
    X : array (n, 3)
        Unit tokens.
    trails : array (k, n, 3), optional
        Their paths.
    color : str
        Colour of the tokens.
    elev, azim : float
        View angles, in degrees.
    title : str, optional
        Title of the panel.

    Returns
    -------
    Axes3D
        ``ax``.

    Raises
    ------
    ValueError
        If ``X`` is not of shape (n, 3).

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> fig = plt.figure()
    >>> ax = fig.add_subplot(projection="3d")
    >>> sphere_tokens(ax, [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]) is ax
    True
    >>> plt.close(fig)
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != 3:
        raise ValueError(f"X must have shape (n, 3), got {X.shape}")
    u, v = np.meshgrid(np.linspace(0, 2 * np.pi, 25), np.linspace(0, np.pi, 13))
    ax.plot_wireframe(np.cos(u) * np.sin(v), np.sin(u) * np.sin(v), np.cos(v),
                      color="0.8", lw=0.4)
    e, a = np.radians(elev), np.radians(azim)
    view = np.array([np.cos(e) * np.cos(a), np.cos(e) * np.sin(a), np.sin(e)])
    if trails is not None:
        T = np.asarray(trails, dtype=np.float64)
        for i in range(T.shape[1]):
            ax.plot(T[:, i, 0], T[:, i, 1], T[:, i, 2], color=color, lw=0.6, alpha=0.5)
    front = X @ view >= 0
    ax.scatter(*X[~front].T, s=12, color=color, alpha=0.3, depthshade=False)
    ax.scatter(*X[front].T, s=16, color=color, edgecolor="k", linewidth=0.4,
               depthshade=False)
    ax.view_init(elev=elev, azim=azim)
    ax.set_box_aspect((1, 1, 1), zoom=1.35)
    ax.set_axis_off()
    if title:
        ax.set_title(title)
    return ax
