"""The chapter notebooks follow the book's conventions (see the rendered-book checks too).

These are static checks of the stored notebooks, the part of the reader's experience that can
be read off the ``.ipynb`` files without building the book:

- every figure is a numbered figure: the cell producing an image carries
  ``mystnb.figure.name`` (``fig-...``) and ``mystnb.figure.caption`` and alt text
  ``mystnb.image.alt``, and its code is hidden (``hide-input``) since it only draws;
- figures are drawn for the text column (``figsize`` width at most
  :data:`transformer_pde.plotting.TEXT_WIDTH` inches) with no font below 9 points;
- figures are sharp on every screen: an SVG, or a PNG with at least
  :data:`transformer_pde.plotting.PIXEL_RATIO` (2) pixels per displayed pixel, its display
  width (in the output's metadata, as the house style stores it) at most the column's width;
  a notebook whose figures were all stored before the house style drew them so (1x PNGs
  without a display width) is an expected failure until it is re-executed, and a failure
  with ``REQUIRE_SHARP_FIGURES=1`` (which ``make test`` sets; ``SHARP=0`` lists them only);
- figure numbers are not typed by hand (``**Figure 3.**``), they come from ``{numref}``;
- results are numbered statements (at least two ``{prf:...}`` environments a chapter) and
  reusable code lives in the library (at most two functions defined in a notebook);
- no ``:class: dropdown`` on ``{prf:proof}`` (it breaks later toggles of the page);
- every draw derives from the seed: the first code cell holds one line ``SEED = <int>``, which
  ``make robust`` replaces, and no generator is seeded with a literal of its own;
- scale switches (lines ``NAME = False`` of the first code cell, which ``make robust`` sets to
  ``True``) carry a comment and are listed on the Reproducing page;
- visible code fits the text column (lines of at most :data:`VISIBLE_LINE` characters in the
  cells a reader sees; the rendered-book check measures the same in pixels);
- no assertion is labelled as holding for "this draw": an assertion states what holds for
  every draw (a theorem, a bound, a rate with a band derived from the number of draws); a fact
  of the stored draw is printed and said in the prose, not asserted.
"""

import base64
import json
import os
import re
import struct
from pathlib import Path

import pytest
from robust import is_install_cell, scale_switches, stored_seed
from transformer_pde.plotting import DPI, PIXEL_RATIO, TEXT_WIDTH

ROOT = Path(__file__).parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# the longest code line the ~690-px column shows without sideways scrolling in the rendered
# book's code font (measured: 83 characters fit, 84 do not)
VISIBLE_LINE = 83
FIGURE_TYPES = ("image/png", "image/svg+xml")
# a figure may be displayed this much wider than TEXT_WIDTH * DPI (the tight bounding box of
# the inline backend adds a few pixels; the rendered-book check allows 5 % of shrinking)
COLUMN_SLACK = 1.05
STATEMENT = re.compile(r"\{prf:(theorem|proposition|lemma|corollary|definition)\}")


def _cells(path):
    return json.loads(path.read_text())["cells"]


def _source(cell):
    return "".join(cell["source"])


@pytest.fixture(params=NOTEBOOKS, ids=lambda p: p.stem)
def notebook(request):
    return request.param


def test_figures_are_numbered_with_caption_alt_text_and_hidden_code(notebook):
    problems = []
    for i, cell in enumerate(_cells(notebook)):
        if cell["cell_type"] != "code":
            continue
        if not any(kind in out.get("data", {}) for out in cell.get("outputs", [])
                   for kind in FIGURE_TYPES):
            continue
        meta = cell.get("metadata", {})
        mystnb = meta.get("mystnb", {})
        figure, image = mystnb.get("figure", {}), mystnb.get("image", {})
        if not str(figure.get("name", "")).startswith("fig-"):
            problems.append(f"cell {i}: no mystnb.figure.name starting with 'fig-'")
        if not str(figure.get("caption", "")).strip():
            problems.append(f"cell {i}: no mystnb.figure.caption")
        if not str(image.get("alt", "")).strip():
            problems.append(f"cell {i}: no alt text (mystnb.image.alt)")
        tags = meta.get("tags", [])
        if "hide-input" not in tags and "remove-input" not in tags:
            problems.append(f"cell {i}: plotting code is not hidden (tag hide-input)")
    assert not problems, f"{notebook.name}: " + "; ".join(problems)


def test_figures_fit_the_column_with_legible_fonts(notebook):
    problems = []
    for i, cell in enumerate(_cells(notebook)):
        if cell["cell_type"] != "code":
            continue
        src = _source(cell)
        for match in re.finditer(r"figsize\s*=\s*\(\s*([0-9.]+)\s*,", src):
            if float(match.group(1)) > TEXT_WIDTH + 1e-9:
                problems.append(f"cell {i}: figsize width {match.group(1)} > {TEXT_WIDTH}")
        for match in re.finditer(r"(?:fontsize|labelsize|size)\s*=\s*([0-9.]+)", src):
            if float(match.group(1)) < 9:
                problems.append(f"cell {i}: font size {match.group(1)} < 9 pt")
        if re.search(r"fontsize\s*=\s*['\"](xx-small|x-small|small)['\"]", src):
            problems.append(f"cell {i}: a relative font size below the default")
    assert not problems, f"{notebook.name}: " + "; ".join(problems)


def _png_size(b64):
    """Pixel width and height of a base64-encoded PNG, read from its IHDR chunk."""
    head = base64.b64decode(b64[:44])
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        raise ValueError("not a PNG")
    return struct.unpack(">II", head[16:24])


def figure_sharpness(cells):
    """Problems of the stored figures, and whether every PNG lacks a display width (1x legacy).

    A PNG is sharp when its pixel width is at least ``PIXEL_RATIO`` times its display width
    (one pixel of slack: a 2x PNG of odd size is 2w + 1); its display width is the output's
    ``metadata["image/png"]["width"]``, else its pixel width. SVG outputs are sharp.
    """
    problems, pngs, legacy = [], 0, 0
    for i, cell in enumerate(cells):
        for out in cell.get("outputs", []) if cell["cell_type"] == "code" else []:
            data = out.get("data", {})
            if "image/png" not in data:
                continue
            b64 = data["image/png"]
            width, _height = _png_size(b64 if isinstance(b64, str) else "".join(b64))
            shown = out.get("metadata", {}).get("image/png", {}).get("width")
            pngs += 1
            legacy += shown is None
            shown = width if shown is None else float(shown)
            if width < PIXEL_RATIO * shown - 1:
                problems.append(f"cell {i}: PNG of {width} px displayed {shown:.0f} px wide "
                                f"(< {PIXEL_RATIO} x)")
            if shown > COLUMN_SLACK * TEXT_WIDTH * DPI:
                problems.append(f"cell {i}: displayed {shown:.0f} px wide, wider than the "
                                f"column ({TEXT_WIDTH * DPI:.0f} px)")
    return problems, pngs > 0 and legacy == pngs


def test_figures_are_sharp(notebook):
    problems, legacy = figure_sharpness(_cells(notebook))
    if problems and legacy and os.environ.get("REQUIRE_SHARP_FIGURES") != "1":
        pytest.xfail(f"{notebook.name}: figures stored as 1x PNGs before the house style drew "
                     "them at 2x; re-execute the notebook (REQUIRE_SHARP_FIGURES=1 fails)")
    assert not problems, f"{notebook.name}: " + "; ".join(problems)


def test_no_hand_typed_figure_numbers(notebook):
    hits = [i for i, cell in enumerate(_cells(notebook))
            if cell["cell_type"] == "markdown"
            and re.search(r"\*\*Fig(ure|\.)\s*\d", _source(cell))]
    assert not hits, f"{notebook.name}: cells {hits} number figures by hand; use {{numref}}"


def test_results_are_statements_and_code_lives_in_the_library(notebook):
    cells = _cells(notebook)
    markdown = "\n".join(_source(c) for c in cells if c["cell_type"] == "markdown")
    code = "\n".join(_source(c) for c in cells if c["cell_type"] == "code")
    assert len(STATEMENT.findall(markdown)) >= 2, f"{notebook.name}: fewer than 2 statements"
    defs = re.findall(r"^\s*def \w+", code, re.M)
    assert len(defs) <= 2, f"{notebook.name}: {len(defs)} functions defined in the notebook"
    assert not re.search(r"\{prf:proof\}[^`]*?:class:\s*dropdown", markdown), (
        f"{notebook.name}: a dropdown proof; wrap long proofs in a {{toggle}} instead")


def _code(notebook):
    """Sources of the code cells, without the cell that installs the library (Colab)."""
    return [_source(c) for c in _cells(notebook)
            if c["cell_type"] == "code" and not is_install_cell(c)]


def test_the_install_cell_comes_right_before_the_seed_cell_hidden_and_silent(notebook):
    cells = [c for c in _cells(notebook) if c["cell_type"] == "code"]
    install = [i for i, c in enumerate(cells) if is_install_cell(c)]
    if not install:
        return  # book/colab_cell.py has not been run on this notebook
    assert install == [0], f"{notebook.name}: the install cell must be the first code cell"
    cell = cells[0]
    assert "remove-cell" in cell["metadata"]["tags"], f"{notebook.name}: install cell shown"
    assert not cell.get("outputs"), f"{notebook.name}: the install cell printed something here"
    assert "importlib.util.find_spec(" in _source(cell), (
        f"{notebook.name}: the install cell does not test whether the library is missing")


def test_every_draw_derives_from_the_seed(notebook):
    nb = json.loads(notebook.read_text())
    stored_seed(nb)  # exactly one `SEED = <int>` line in the first code cell
    code = "\n".join(_code(notebook))
    assert re.search(r"default_rng\(SEED\)", _code(notebook)[0]), (
        f"{notebook.name}: the first code cell should draw from np.random.default_rng(SEED)")
    literal = re.findall(r"(?:default_rng|RandomState|random\.seed)\(\s*\d+\s*\)", code)
    assert not literal, (f"{notebook.name}: generators seeded with a literal {literal}; derive "
                         "them from SEED (e.g. default_rng([SEED, k])) or search over seeds")


def test_scale_switches_are_commented_and_documented(notebook):
    first = _code(notebook)[0]
    reproducing = (ROOT / "book" / "reproducing.md").read_text()
    for name in scale_switches(json.loads(notebook.read_text())):
        assert re.search(rf"#[^\n]*\n(?:#[^\n]*\n)*{name} = False", first), (
            f"{notebook.name}: scale switch {name} has no comment above it")
        assert f"`{name}`" in reproducing, (
            f"{notebook.name}: scale switch {name} is not listed on the Reproducing page")


def test_no_assertion_holds_for_this_draw_only(notebook):
    hits = [line.strip() for src in _code(notebook) for line in src.splitlines()
            if re.match(r"\s*assert\b", line)
            and re.search(r"this (draw|seed)|stored draw", line, re.I)]
    assert not hits, (f"{notebook.name}: assertions about one draw {hits}; assert what holds "
                      "for every draw and print the rest")


def test_visible_code_fits_the_column(notebook):
    problems = []
    for i, cell in enumerate(_cells(notebook)):
        tags = cell.get("metadata", {}).get("tags", [])
        hidden = {"hide-input", "remove-input", "remove-cell"} & set(tags)
        if cell["cell_type"] != "code" or hidden:
            continue
        for line in _source(cell).splitlines():
            if len(line) > VISIBLE_LINE:
                problems.append(f"cell {i}: {len(line)} characters: {line.strip()[:50]}")
    assert not problems, problems


def test_no_placeholder_left_in_the_text(notebook):
    markdown = "\n".join(_source(c) for c in _cells(notebook) if c["cell_type"] == "markdown")
    hits = re.findall(r"\{\{[^}]*\}\}|\bTODO\b|\bXX_\w+|\bFIXME\b", markdown)
    assert not hits, f"{notebook.name}: placeholders in the text {hits}"


def test_house_style_stores_sharp_figures_and_the_check_tells_them_apart(tmp_path, monkeypatch):
    """The house style's inline PNG (2x, display width in the metadata) passes the sharpness
    check, a 1x PNG without the width fails it, and the figure keeps its proportions."""
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.core.pylabtools import print_figure
    from transformer_pde.plotting import use_house_style

    shell = InteractiveShell.instance()
    monkeypatch.setattr("IPython.get_ipython", lambda: shell)
    use_house_style()
    fig, ax = plt.subplots(figsize=(TEXT_WIDTH, 3.0))
    ax.scatter(range(5000), range(5000), s=1)
    data, metadata = shell.display_formatter.format(fig)
    plt.close(fig)
    png_metadata = metadata["image/png"]
    assert set(png_metadata) == {"width"}, png_metadata  # no height: no squashing
    width, height = _png_size(data["image/png"])
    assert width in (2 * png_metadata["width"], 2 * png_metadata["width"] + 1)
    sharp = {"cell_type": "code", "outputs": [{"data": {"image/png": data["image/png"]},
                                               "metadata": metadata}]}
    assert figure_sharpness([sharp]) == ([], False)
    fig, ax = plt.subplots(figsize=(TEXT_WIDTH, 3.0))
    ax.plot([0, 1])
    one_x = print_figure(fig, base64=True)
    blurry = {"cell_type": "code", "outputs": [{"data": {"image/png": one_x}, "metadata": {}}]}
    problems, legacy = figure_sharpness([blurry])
    assert legacy and len(problems) == 1 and "< 2 x" in problems[0]
    plt.close("all")
