"""The `strata` wheel, installed: run by scripts/python-wheel.sh (pytest, in a fresh venv)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys

import pytest

import strata

REPO = os.environ.get("STRATA_REPO", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")))
DEBATE = os.path.join(REPO, "data", "debate.jsonl")
DOCS = {
    "notes/harbour.md": "The harbour board met on Tuesday. It approved a levy of 4.2 percent on cargo "
    "to pay for the new breakwater, which the engineers expect to finish in 2029.\n\n"
    "Members also heard a report on silt. Dredging costs rose by a third last year.",
    "notes/library.md": "The library fund received a grant of 900,000 euros. The reading room "
    "will reopen in May with longer evening hours.",
}


def turn_texts() -> dict:
    out = {}
    with open(DEBATE, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                out[f"{os.path.relpath(DEBATE)}#{n}"] = json.loads(line)["text"]
    return out


@pytest.fixture()
def db(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    return strata.open(tmp_path / "store")


def test_ingest_compress_context_query_with_citations_that_read_back(db):
    r = db.ingest("debate", [os.path.relpath(DEBATE)])
    assert r["scope"] == "debate" and r["added"] == len(turn_texts())
    assert db.ingest("notes", DOCS)["added"] == 2
    db.compress("debate")
    w = db.context("debate", budget=800)
    assert isinstance(w, strata.ContextWindow)
    assert 0 < w.tokens <= 800 and w.text
    focused = db.context("debate", budget=600, for_="What did chen propose about fares?")
    assert focused.tokens <= 600 and any(n.spans for n in focused.nodes)
    q = db.query("debate", "What did chen propose about fares?")
    assert isinstance(q, strata.QueryResult) and q.citations
    texts = turn_texts()
    for c in q.citations:
        assert isinstance(c, strata.Citation)
        assert texts[c.source].encode()[c.start : c.end].decode() == c.quote
    n = db.query("notes", "What levy did the harbour board approve?")
    assert n.citations
    for c in n.citations:
        assert DOCS[c.source].encode()[c.start : c.end].decode() == c.quote
    assert any("4.2" in c.quote for c in n.citations)


def test_append_grep_peek_stats(db):
    db.ingest("debate", [os.path.relpath(DEBATE)])
    a = db.append("debate", round=99, speaker="ada", text="I propose a ferry subsidy of 3.1 million.", time="2026-03-04")
    assert a.source
    hits = db.grep("debate", "ferry subsidy")
    assert hits and isinstance(hits[0], strata.GrepHit)
    node = db.peek(hits[0].id)
    assert "ferry" in node.text.lower()
    s = db.stats()
    assert any(x["scope"] == "debate" for x in s["scopes"])


def test_forget_removes_a_source_and_what_was_built_on_it(db):
    db.ingest("notes", DOCS)
    db.compress("notes")
    assert any("900,000" in c.quote for c in db.query("notes", "How large was the library grant?").citations)
    r = db.forget("notes", ["notes/library.md"])
    assert r["sources"] == ["notes/library.md"] and r["nodes"] > 0
    q = db.query("notes", "How large was the library grant?")
    assert all(c.source != "notes/library.md" for c in q.citations)
    assert "900,000" not in db.context("notes", level="full", budget=2000).text
    assert not [h for h in db.grep("notes", "library grant") if "900,000" in h.text]
    with pytest.raises(strata.StrataError):
        db.forget("notes")  # neither sources nor whole_scope
    db.forget("notes", whole_scope=True)
    with pytest.raises(strata.StrataError):
        db.query("notes", "anything?")


def test_async_twins(db):
    async def run():
        await db.aingest("notes", DOCS)
        await db.acompress("notes")
        q = await db.aquery("notes", "When will the reading room reopen?")
        w = await db.acontext("notes", budget=300)
        return q, w

    q, w = asyncio.run(run())
    assert q.citations and w.tokens <= 300


def test_errors_are_exceptions_with_one_line(db):
    with pytest.raises(strata.StrataError) as e:
        db.query("no-such-scope", "anything?")
    assert "unknown scope" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(strata.StrataError):
        db.context("notes", budget=0)
    with pytest.raises(strata.StrataError):
        db.append("debate", round=1, speaker="", text="x")


def test_the_strata_command_comes_with_the_wheel(tmp_path):
    exe = shutil.which("strata")
    assert exe, "the wheel installs a `strata` command"
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True).stdout
    assert out.startswith("strata")
    p = subprocess.run(
        [exe, "--db", str(tmp_path / "cli"), "--json", "ingest", "--scope", "d", DEBATE],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr


def test_tools_are_plain_callables_with_docstrings(db):
    db.ingest("notes", DOCS)
    fns = strata.tools(db, "notes")
    assert [f.__name__ for f in fns] == ["grep", "peek", "context", "query"]
    assert all(f.__doc__ for f in fns)
    grep, peek, context, query = fns
    out = grep("library grant")
    assert "library" in out.lower()
    first = out.splitlines()[0]
    first_id, snippet = first.split()[0], first.split("] ", 1)[1]
    # peek reads the whole node the hit named: its text begins with the hit's.
    assert peek(first_id).startswith(snippet)
    assert "900,000" in query("How large was the library grant?")
    assert context(200)


def test_settings_reach_the_config(tmp_path):
    with pytest.raises(strata.StrataError) as e:
        strata.open(tmp_path / "s", chunk_tokens="not-a-number")
    assert "\n" not in str(e.value)


def test_a_build_leaves_a_snapshot_of_the_log(tmp_path, monkeypatch):
    # What the CLI leaves after a command that wrote: read-only opens after the build then
    # start from the snapshot instead of scanning all the build wrote.
    monkeypatch.chdir(REPO)
    store = tmp_path / "store"

    def newest_snapshot() -> int:
        snaps = [p.name for p in (store / "store").iterdir() if p.name.startswith("snap.")]
        return max((int(n.split(".")[1], 16) for n in snaps if n.count(".") == 1), default=-1)

    db = strata.open(store)
    db.ingest("debate", [os.path.relpath(DEBATE)])
    before = newest_snapshot()
    db.compress("debate")
    after_build = newest_snapshot()
    assert after_build > before, (before, after_build)
    db.append("debate", 99, "moss", "One more turn after the build.")
    del db
    import gc

    gc.collect()
    assert newest_snapshot() > after_build
