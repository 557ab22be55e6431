"""Open every page of the built book in headless Chromium and check what a reader sees.

Run after the book build (``make browser``; part of ``make test``)::

    .venv/bin/python tests/check_rendered_book.py _build/html

The built HTML is served on 127.0.0.1 and every page is loaded by Playwright driving the
system's Chromium (``--chromium PATH``, default ``/usr/bin/chromium``; Playwright downloads no
browser). On each page it checks that

- MathJax finished and typeset every math element, with no MathJax error and no undefined
  macro (MathJax shows those in red);
- every image loaded (natural width > 0), and no figure is shrunk by more than 5 % to fit the
  text column (figures are drawn for the column, so their fonts are read at their size; a
  figure's intended width is its ``width`` attribute, which myst-nb takes from the output's
  metadata, or else its natural width);
- no figure is distorted (displayed with its own height/width ratio, within 1 %);
- every figure is sharp: an SVG, or an image with at least :data:`MIN_PIXEL_RATIO` (2) image
  pixels per displayed pixel, so that it stays sharp on high-resolution screens and zoomed to
  200 % (the house style, ``transformer_pde.plotting.use_house_style``, stores inline figures
  so). With ``--require-sharp`` (``make browser``, whose
  ``SHARP`` is 1 by default) a figure that is not is a problem of its page; without it, a note;
- no display equation is wider than its box (with its equation number);
- no console error and no page error (except the documented noise in ``ALLOWED_CONSOLE``);
- no request goes to any host but 127.0.0.1 (such requests are blocked and reported);
- visible code takes at most a quarter of the page's height, and no visible line of code
  or of printed output needs sideways scrolling;

and saves a full-page screenshot under ``_build/screenshots/`` for a person to look at.
It prints one line per page and exits with status 1 if any problem was found.
"""

import argparse
import functools
import http.server
import re
import sys
import threading
from pathlib import Path
from urllib.parse import urlparse

# Console messages that Jupyter Book 1 itself produces, with the reason they are harmless.
ALLOWED_CONSOLE = [
    # pydata-sphinx-theme (under sphinx-book-theme) reads the colour mode from localStorage;
    # on a reader's first visit it is empty, the theme logs this and sets "auto" (harmless).
    (r"^Got invalid theme mode: \. Resetting to auto\.$",
     "pydata-sphinx-theme on a first visit"),
]

MAX_CODE_FRACTION = 0.25
MIN_FIGURE_SCALE = 0.95
MIN_PIXEL_RATIO = 2
WINDOW = {"width": 1280, "height": 900}

PAGE_CHECKS_JS = r"""
async () => {
  const out = {problems: [], blurry: [], stats: {}};
  // 1. MathJax: wait for the typesetting to finish, then look for leftovers and errors.
  const mathNodes = document.querySelectorAll('span.math, div.math');
  out.stats.math = mathNodes.length;
  if (mathNodes.length > 0) {
    if (!(window.MathJax && MathJax.startup && MathJax.startup.promise)) {
      out.problems.push('MathJax is not loaded but the page has ' + mathNodes.length +
                        ' math elements');
    } else {
      await MathJax.startup.promise;
      if (MathJax.typesetPromise) { await MathJax.typesetPromise(); }
      let raw = 0, first = '';
      for (const el of mathNodes) {
        if (!el.querySelector('mjx-container')) {
          raw += 1; if (!first) first = el.textContent.trim().slice(0, 60);
        }
      }
      if (raw) out.problems.push(raw + ' math elements not typeset, e.g. ' + first);
      const errors = document.querySelectorAll('mjx-merror');
      for (const e of errors) {
        out.problems.push('MathJax error: ' + (e.getAttribute('data-mjx-error') ||
                          e.textContent).slice(0, 80));
      }
      // undefined macros are shown as red text by MathJax's noundefined extension
      for (const e of document.querySelectorAll('mjx-container [style*="color: red"], ' +
                                                 'mjx-container [mathcolor="red"]')) {
        out.problems.push('undefined macro in math: ' + e.textContent.slice(0, 40));
      }
    }
  }
  // 2. Display equations must fit their box, equation number included.
  let wide = 0;
  for (const box of document.querySelectorAll('div.math')) {
    const mjx = box.querySelector('mjx-container');
    if (!mjx) continue;
    const inner = mjx.querySelector('mjx-math') || mjx;
    const eqno = box.querySelector('span.eqno');
    const need = inner.getBoundingClientRect().width +
                 (eqno ? eqno.getBoundingClientRect().width : 0);
    const have = box.getBoundingClientRect().width;
    if (need > have + 1) {
      wide += 1;
      out.problems.push('display equation wider than its box (' + Math.round(need) +
                        ' px > ' + Math.round(have) + ' px)' +
                        (box.id ? ' #' + box.id : '') + ': ' +
                        (mjx.getAttribute('aria-label') || box.textContent).trim().slice(0, 50));
    }
  }
  out.stats.display_math = document.querySelectorAll('div.math').length;
  // 3. Images: loaded, figures not shrunk, and sharp (SVG, or >= MIN_PIXEL_RATIO image pixels
  //    per displayed pixel).
  const imgs = Array.from(document.images);
  out.stats.images = imgs.length;
  out.stats.figures = 0;
  for (const img of imgs) {
    if (!img.complete || img.naturalWidth === 0) {
      out.problems.push('image did not load: ' + img.getAttribute('src'));
      continue;
    }
    if (img.offsetParent === null) continue;
    const name = (img.getAttribute('alt') || img.getAttribute('src')).slice(0, 60);
    const shown = img.getBoundingClientRect().width;
    if (img.closest('.cell_output')) {
      // the intended width: the width attribute (or style) myst-nb writes from the output's
      // metadata (a 2x PNG carries its display width there), else the natural width
      const declared = parseFloat(img.getAttribute('width')) || parseFloat(img.style.width) ||
                       img.naturalWidth;
      const scale = shown / declared;
      if (scale < MIN_FIGURE_SCALE) {
        out.problems.push('figure shrunk to ' + Math.round(100 * scale) + ' % (intended width ' +
                          Math.round(declared) + ' px): draw it for the column: ' + name);
      }
    }
    if (img.closest('.cell_output, figure')) {
      out.stats.figures += 1;
      // drawn with its own proportions (a fixed height on a narrowed image squashes it)
      const rect = img.getBoundingClientRect();
      const aspect = (rect.height / rect.width) / (img.naturalHeight / img.naturalWidth);
      if (Math.abs(aspect - 1) > 0.01) {
        out.problems.push('figure distorted: displayed height/width ' +
                          (100 * aspect).toFixed(1) + ' % of its own: ' + name);
      }
      const src = (img.getAttribute('src') || '').split(/[?#]/)[0].toLowerCase();
      const svg = src.endsWith('.svg') || src.startsWith('data:image/svg');
      // one pixel of slack: the 2x PNG of a figure with an odd pixel count is 2w or 2w + 1
      if (!svg && img.naturalWidth < MIN_PIXEL_RATIO * shown - 1) {
        out.blurry.push('figure not sharp: ' + img.naturalWidth + ' px drawn, ' +
                        Math.round(shown) + ' px displayed (' +
                        (img.naturalWidth / shown).toFixed(2) + ' x < ' + MIN_PIXEL_RATIO +
                        ' x): ' + name);
      }
    }
  }
  // 4. Visible code: share of the page height, and no sideways scrolling.
  const pageHeight = document.documentElement.scrollHeight;
  let codeHeight = 0;
  for (const cell of document.querySelectorAll('.cell_input')) {
    // skip code inside a collapsed "hide-input" toggle
    if (cell.closest('details:not([open])') || !cell.checkVisibility()) continue;
    const h = cell.getBoundingClientRect().height;
    codeHeight += h;
    const pre = cell.querySelector('pre');
    if (pre && pre.scrollWidth > pre.clientWidth + 1) {
      const lines = pre.textContent.split('\n');
      const longest = lines.reduce((a, b) => (b.length > a.length ? b : a), '');
      out.problems.push('visible code needs sideways scrolling (' + longest.length +
                        ' characters): ' + longest.trim().slice(0, 60));
    }
  }
  // Printed text outputs (stdout, text results) are read like prose: no sideways scrolling.
  for (const pre of document.querySelectorAll('.cell_output pre')) {
    if (pre.closest('details:not([open])') || !pre.checkVisibility()) continue;
    if (pre.scrollWidth > pre.clientWidth + 1) {
      const lines = pre.textContent.split('\n');
      const longest = lines.reduce((a, b) => (b.length > a.length ? b : a), '');
      out.problems.push('printed output needs sideways scrolling (' + longest.length +
                        ' characters): ' + longest.trim().slice(0, 60));
    }
  }
  out.stats.code_fraction = codeHeight / pageHeight;
  if (codeHeight / pageHeight > MAX_CODE_FRACTION) {
    out.problems.push('visible code takes ' + Math.round(100 * codeHeight / pageHeight) +
                      ' % of the page height (at most ' + Math.round(100 * MAX_CODE_FRACTION) +
                      ' %): hide code that only draws or prints');
  }
  return out;
}
""".replace("MIN_FIGURE_SCALE", str(MIN_FIGURE_SCALE)).replace(
    "MAX_CODE_FRACTION", str(MAX_CODE_FRACTION)).replace(
    "MIN_PIXEL_RATIO", str(MIN_PIXEL_RATIO))


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve(root):
    """Serve ``root`` on 127.0.0.1 on a free port, in a daemon thread; return the server."""
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def pages(root):
    """The HTML pages of the book (not the theme's templates, sources or redirect stubs)."""
    skip = {"_static", "_sources", "_images", "_sphinx_design_static", "_panels_static"}
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.html")
                  if not (set(p.relative_to(root).parts) & skip)
                  and 'http-equiv="Refresh"' not in p.read_text(errors="replace")[:300])


def allowed(message):
    return any(re.search(pattern, message) for pattern, _reason in ALLOWED_CONSOLE)


def check(root, chromium, screenshots, require_sharp=False):
    from playwright.sync_api import sync_playwright

    server = serve(root)
    host, port = server.server_address
    base = f"http://{host}:{port}/"
    screenshots.mkdir(parents=True, exist_ok=True)
    failures = 0
    blurry_pages = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=chromium, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync"])
        context = browser.new_context(viewport=WINDOW, device_scale_factor=1)
        for rel in pages(root):
            page = context.new_page()
            problems, external = [], []

            def route(route_obj, external=external):
                url = route_obj.request.url
                parsed = urlparse(url)
                if parsed.scheme in ("data", "blob") or (
                        parsed.hostname == host and parsed.port == port):
                    route_obj.continue_()
                else:
                    external.append(url)
                    route_obj.abort()

            page.route("**/*", route)
            page.on("console", lambda msg, problems=problems: (
                problems.append(f"console {msg.type}: {msg.text[:160]}")
                if msg.type == "error" and not allowed(msg.text) else None))
            page.on("pageerror", lambda exc, problems=problems: problems.append(
                f"page error: {str(exc)[:160]}"))
            page.on("requestfailed", lambda req, problems=problems, external=external: (
                problems.append(f"request failed: {req.url}")
                if req.url not in external else None))
            page.goto(base + rel, wait_until="load")
            result = page.evaluate(PAGE_CHECKS_JS)
            page.wait_for_timeout(100)
            problems += result["problems"]
            blurry = result["blurry"]
            if blurry:
                blurry_pages.append(rel)
            if require_sharp:
                problems += blurry
            problems += [f"request to another host (blocked): {u}" for u in sorted(set(external))]
            shot = screenshots / (rel.replace("/", "__").removesuffix(".html") + ".png")
            page.screenshot(path=str(shot), full_page=True)
            stats = result["stats"]
            status = "ok" if not problems else f"{len(problems)} problem(s)"
            print(f"{rel:<45} {status:<14} math {stats.get('math', 0):>4}  "
                  f"images {stats.get('images', 0):>3}  "
                  f"visible code {100 * stats.get('code_fraction', 0):4.1f} %")
            for problem in problems:
                print(f"    - {problem}")
            if not require_sharp:
                for note in blurry:
                    print(f"    - note (not counted; --require-sharp counts it): {note}")
            failures += bool(problems)
            page.close()
        browser.close()
    server.shutdown()
    if blurry_pages:
        print(f"figures not sharp (fewer than {MIN_PIXEL_RATIO} image pixels per displayed "
              f"pixel) on {len(blurry_pages)} page(s): {', '.join(blurry_pages)}"
              + ("" if require_sharp else
                 " (not counted: re-execute these notebooks under the house style; "
                 "--require-sharp counts them)"))
    return failures


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("html", type=Path, help="the built book, e.g. _build/html")
    parser.add_argument("--chromium", default="/usr/bin/chromium",
                        help="Chromium executable (default /usr/bin/chromium)")
    parser.add_argument("--screenshots", type=Path, default=None,
                        help="folder for the screenshots (default: <html>/../screenshots)")
    parser.add_argument("--require-sharp", action="store_true",
                        help=f"count a figure that is neither an SVG nor drawn with at least "
                             f"{MIN_PIXEL_RATIO} pixels per displayed pixel as a problem "
                             f"(without it, such figures are listed as notes)")
    args = parser.parse_args(argv)
    root = args.html.resolve()
    if not (root / "index.html").is_file():
        sys.exit(f"{root} has no index.html: build the book first (make book)")
    if not Path(args.chromium).is_file():
        sys.exit(f"Chromium not found at {args.chromium}. Install it (Debian/Ubuntu: "
                 "apt-get install chromium) or skip the browser check with make test BROWSER=0")
    screenshots = args.screenshots or root.parent / "screenshots"
    failures = check(root, args.chromium, screenshots, require_sharp=args.require_sharp)
    n = len(pages(root))
    print(f"browser check: {n - failures} of {n} pages without problems; "
          f"screenshots in {screenshots}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
