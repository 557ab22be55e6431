"""Every entry of the book's bibliography (book/references.bib) links to its source.

A reader of a citation can open the work it names: every entry carries a ``doi`` (checked
form ``10.<registrant>/<suffix>``, without the ``https://doi.org/`` prefix) or a ``url``
(https). An arXiv link is the abstract page of one version (``https://arxiv.org/abs/<id>vN``),
the version the book read and cites, so that theorem and section numbers stay valid when the
authors revise the paper; an arXiv identifier named elsewhere in the entry (``note``,
``journal``, ``eprint``) is the one linked. Entries whose link could not be confirmed yet are
listed in :data:`UNCONFIRMED_LINKS` with the reason; the list may only shrink (an entry of
it that has a link, or that is gone, fails the test too).
"""

import re
from pathlib import Path

import pytest

BIB = Path(__file__).parent.parent / "book" / "references.bib"

# Entries without a link, each with why: no identifier for them could be confirmed against
# a public record yet (a link is added when one is; never guessed).
UNCONFIRMED_LINKS: dict[str, str] = {}

ARXIV_ID = re.compile(r"\b(\d{4}\.\d{4,5})(v\d+)?\b")
ARXIV_ABS = re.compile(r"^https://arxiv\.org/abs/(\d{4}\.\d{4,5})v(\d+)$")
DOI = re.compile(r"^10\.\d{4,9}/\S+$")


def parse_bib(text):
    """The entries of a BibTeX text as ``{key: {field: value}}`` (braced or quoted values)."""
    entries = {}
    for match in re.finditer(r"@(\w+)\s*\{\s*([^,\s]+)\s*,", text):
        if match.group(1).lower() in ("comment", "string", "preamble"):
            continue
        depth, i = 1, match.end()
        while depth and i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        body = text[match.end():i - 1]
        fields, j = {}, 0
        for field in re.finditer(r"(\w+)\s*=\s*", body):
            if field.start() < j:
                continue
            name, j = field.group(1).lower(), field.end()
            if j < len(body) and body[j] in "{\"":
                close = "}" if body[j] == "{" else "\""
                depth, k = 1, j + 1
                while depth and k < len(body):
                    if close == "}":
                        depth += {"{": 1, "}": -1}.get(body[k], 0)
                    elif body[k] == "\"":
                        depth = 0
                    k += 1
                fields[name] = body[j + 1:k - 1].strip()
                j = k
            else:
                value = re.match(r"[^,\n]*", body[j:]).group(0)
                fields[name] = value.strip()
                j += len(value)
        entries[match.group(2)] = fields
    return entries


def link_problems(key, fields):
    """What is wrong with the link of one entry (empty when it links as the book requires)."""
    doi, url = fields.get("doi"), fields.get("url")
    if not doi and not url:
        return [f"{key}: no doi and no url"]
    problems = []
    if doi and not DOI.match(doi):
        problems.append(f"{key}: doi {doi!r} is not of the form 10.xxxx/suffix (no URL prefix)")
    if url:
        if not url.startswith("https://"):
            problems.append(f"{key}: url {url!r} is not https")
        if "arxiv.org" in url:
            match = ARXIV_ABS.match(url)
            if not match:
                problems.append(f"{key}: arXiv url {url!r} is not an abstract page with a "
                                "version (https://arxiv.org/abs/<id>vN)")
            else:
                named = {m.group(1) for name in ("note", "journal", "eprint", "howpublished")
                         for m in ARXIV_ID.finditer(fields.get(name, ""))}
                if named and match.group(1) not in named:
                    problems.append(f"{key}: links arXiv {match.group(1)} but names "
                                    f"{sorted(named)}")
    return problems


def test_every_entry_links_to_its_source():
    entries = parse_bib(BIB.read_text())
    assert len(entries) > 50, "the bibliography was not parsed"
    problems = [p for key, fields in entries.items() if key not in UNCONFIRMED_LINKS
                for p in link_problems(key, fields)]
    assert not problems, "\n".join(problems)


def test_the_list_of_unconfirmed_links_only_shrinks():
    entries = parse_bib(BIB.read_text())
    stale = [key for key in UNCONFIRMED_LINKS
             if key not in entries or entries[key].get("doi") or entries[key].get("url")]
    assert not stale, (f"{stale}: gone or linked now; remove them from UNCONFIRMED_LINKS "
                       "(then the link is checked like every other)")


@pytest.mark.parametrize("fields, expected", [
    ({}, "no doi and no url"),
    ({"url": "https://arxiv.org/abs/2305.05465"}, "with a version"),
    ({"url": "https://arxiv.org/abs/2305.05465v6"}, None),
    ({"url": "http://example.org/paper"}, "not https"),
    ({"doi": "https://doi.org/10.1007/x"}, "not of the form"),
    ({"doi": "10.1007/978-3-540-71050-9"}, None),
    ({"url": "https://arxiv.org/abs/2305.05465v6", "note": "arXiv:2510.22026"}, "names"),
])
def test_the_link_check_rejects_what_it_should(fields, expected):
    problems = link_problems("key", fields)
    if expected is None:
        assert problems == []
    else:
        assert len(problems) == 1 and expected in problems[0], problems


def test_the_parser_reads_nested_braces_and_last_fields():
    text = ("@article{a,\n  title = {The {B}ures--{W}asserstein distance},\n"
            "  doi = {10.1/x}\n}\n@misc{b, year = 2020, url = \"https://x.org\"}\n")
    entries = parse_bib(text)
    assert entries["a"] == {"title": "The {B}ures--{W}asserstein distance", "doi": "10.1/x"}
    assert entries["b"] == {"year": "2020", "url": "https://x.org"}
