"""Sphinx extension of the book: each script of a page is included once.

Under Jupyter Book 1 the inline set-up scripts of sphinx-thebe and sphinx-togglebutton are
added twice to every page; the second ``const THEBE_JS_URL = ...`` then throws
"Identifier 'THEBE_JS_URL' has already been declared" in the reader's browser. This keeps the
first copy of every identical script (same file, same attributes and inline body, whatever
its priority).
"""


def _unique_scripts(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for script in scripts:
        attributes = getattr(script, "attributes", {}) or {}
        filename = getattr(script, "filename", script) or ""  # inline: None or ""
        key = (str(filename), tuple(sorted((k, str(v)) for k, v in attributes.items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    scripts[:] = unique


def setup(app):
    # run after the extensions that add the scripts
    app.connect("html-page-context", _unique_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
