"""strata in-process: long context cut into levels, compressed, cached, and queried with
citations to exact source spans — no server.

    import strata
    db = strata.open("./data")                  # or "postgres://user:pw@host/db"
    db.ingest("debate", ["debate.jsonl"])
    db.append("debate", round=45, speaker="ada", text="I propose a cap of 6.50.")
    db.compress("debate")
    print(db.context("debate", budget=2000).text)
    r = db.query("debate", "What did ada propose?")
    for c in r.citations:
        print(c.source, c.start, c.end, c.quote)

Every method has an async twin (`await db.aquery(...)`, ...), run in a worker thread (the
engine releases the GIL while it works). Errors raise `strata.StrataError` with strata's
one-line message. `strata.tools(db, scope)` returns grep/peek/context/query as plain
callables with docstrings, for agent frameworks (e.g. `dspy.RLM(tools=...)`).
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from ._strata import VERSION, StrataError
from ._strata import Db as _Db

__all__ = [
    "VERSION",
    "StrataError",
    "Db",
    "open",
    "Citation",
    "QueryResult",
    "Span",
    "ContextNode",
    "ContextWindow",
    "GrepHit",
    "IngestReport",
    "Node",
    "tools",
]

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class Citation:
    """An exact source span: `quote` is the bytes [start, end) of `source`'s text."""

    source: str
    start: int
    end: int
    quote: str
    round: Optional[int] = None
    speaker: Optional[str] = None
    time: Optional[str] = None


@dataclass(frozen=True)
class QueryResult:
    answer: str
    ready: bool
    confidence: float
    citations: List[Citation]
    history: List[str] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class Span:
    source: str
    start: int
    end: int


@dataclass(frozen=True)
class ContextNode:
    id: str
    level: str
    tokens: int
    part: str
    spans: List[Span]
    why: Optional[Any] = None


@dataclass(frozen=True)
class ContextWindow:
    scope: str
    level: str
    budget: int
    tokens: int
    text: str
    nodes: List[ContextNode]
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class GrepHit:
    id: str
    scope: str
    level: str
    score: float
    text: str
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class IngestReport:
    raw: Dict[str, Any]
    source: Optional[str] = None

    def __getitem__(self, k: str) -> Any:
        return self.raw[k]


@dataclass(frozen=True)
class Node:
    id: str
    level: str
    text: str
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)


def _citation(c: Dict[str, Any]) -> Citation:
    return Citation(
        source=c["source"],
        start=int(c["start"]),
        end=int(c["end"]),
        quote=c.get("quote", ""),
        round=c.get("round"),
        speaker=c.get("speaker"),
        time=c.get("time"),
    )


def _query(raw: Dict[str, Any]) -> QueryResult:
    return QueryResult(
        answer=raw.get("answer", ""),
        ready=bool(raw.get("ready")),
        confidence=float(raw.get("confidence") or 0.0),
        citations=[_citation(c) for c in raw.get("citations", [])],
        history=list(raw.get("refinement_history", [])),
        raw=raw,
    )


def _window(raw: Dict[str, Any]) -> ContextWindow:
    nodes = [
        ContextNode(
            id=n.get("id", ""),
            level=str(n.get("level", "")),
            tokens=int(n.get("tokens", 0)),
            part=str(n.get("part", "")),
            spans=[Span(s["source"], int(s["start"]), int(s["end"])) for s in n.get("spans") or []],
            why=n.get("why"),
        )
        for n in raw.get("nodes", [])
    ]
    return ContextWindow(
        scope=raw.get("scope", ""),
        level=str(raw.get("level", "")),
        budget=int(raw.get("budget", 0)),
        tokens=int(raw.get("tokens", 0)),
        text=raw.get("text", ""),
        nodes=nodes,
        raw=raw,
    )


def _hit(raw: Dict[str, Any]) -> GrepHit:
    return GrepHit(
        id=str(raw.get("id", "")),
        scope=str(raw.get("scope", "")),
        level=str(raw.get("level", "")),
        score=float(raw.get("score", 0.0)),
        text=str(raw.get("text", raw.get("snippet", ""))),
        raw=raw,
    )


def _scopes(scope: Union[str, Sequence[str], None]) -> List[str]:
    if scope is None:
        return []
    if isinstance(scope, str):
        return [scope]
    return list(scope)


class Db:
    """An open strata store. Open one with `strata.open(path)`."""

    def __init__(self, path: PathLike, config: Optional[PathLike] = None, **settings: Any) -> None:
        pairs = [(k, str(v)) for k, v in settings.items()]
        self._db = _Db(os.fspath(path), None if config is None else os.fspath(config), pairs)

    # -- writes ----------------------------------------------------------------------------

    def ingest(
        self,
        scope: str,
        sources: Union[PathLike, Sequence[PathLike], Dict[str, str]],
        kind: Optional[str] = None,
        time: Optional[str] = None,
    ) -> IngestReport:
        """Ingests files (a path or paths: `.jsonl` debates, `.txt`/`.md` documents) or
        texts (a dict source id -> text, as documents) into `scope`."""
        if isinstance(sources, dict):
            return IngestReport(json.loads(self._db.ingest_texts(scope, list(sources.items()), time)))
        if isinstance(sources, (str, os.PathLike)):
            sources = [sources]
        paths = [os.fspath(p) for p in sources]
        return IngestReport(json.loads(self._db.ingest_files(scope, paths, kind, time)))

    def append(self, debate: str, round: int, speaker: str, text: str, time: Optional[str] = None) -> IngestReport:
        """Appends one turn to a debate; durable when this returns. `time`: RFC 3339 or a date."""
        raw = json.loads(self._db.append(debate, round, speaker, text, time))
        return IngestReport(raw["report"], raw["source"])

    def compress(self, scope: str) -> Dict[str, Any]:
        """Builds (or refreshes) every level of `scope`; returns the build report."""
        return json.loads(self._db.compress(scope))

    def forget(self, scope: str, sources: Optional[Sequence[str]] = None, whole_scope: bool = False) -> Dict[str, Any]:
        """Removes `sources` of `scope` and every node derived from them (the whole scope
        with `whole_scope=True`), durably: a forgotten quote never comes back in a citation.
        Returns what was removed (sources, nodes by level, bytes)."""
        return json.loads(self._db.forget(scope, list(sources or []), whole_scope))

    # -- reads -----------------------------------------------------------------------------

    def context(
        self,
        scope: str,
        level: str = "auto",
        budget: int = 2000,
        for_: Optional[str] = None,
        since: Optional[str] = None,
        until: Optional[str] = None,
    ) -> ContextWindow:
        """The context of `scope` within `budget` tokens: at `level` (auto, full, detailed,
        summary, abstract, metadata), or the best view for the question `for_`."""
        return _window(json.loads(self._db.context(scope, level, budget, for_, since, until)))

    def query(self, scope: Union[str, Sequence[str], None], question: str) -> QueryResult:
        """Answers `question` over `scope` (a name, names, or None for every scope) with
        citations to exact source spans."""
        return _query(json.loads(self._db.query(_scopes(scope), question)))

    def grep(
        self, scope: Union[str, Sequence[str], None], pattern: str, level: Optional[str] = None, limit: int = 20
    ) -> List[GrepHit]:
        """BM25 search (what the navigator's grep sees), best first."""
        levels = [] if level is None else [level]
        return [_hit(h) for h in json.loads(self._db.grep(_scopes(scope), pattern, levels, limit))]

    def peek(self, node_id: str) -> Node:
        """One node, whole, by its id (as grep hits and context nodes name it)."""
        raw = json.loads(self._db.peek(node_id))
        return Node(id=str(raw.get("id", node_id)), level=str(raw.get("level", "")), text=raw.get("text", ""), raw=raw)

    def stats(self) -> Dict[str, Any]:
        """Store-wide numbers, per scope."""
        return json.loads(self._db.stats())

    # -- async twins -----------------------------------------------------------------------

    async def aingest(self, *a: Any, **k: Any) -> IngestReport:
        return await asyncio.to_thread(self.ingest, *a, **k)

    async def aappend(self, *a: Any, **k: Any) -> IngestReport:
        return await asyncio.to_thread(self.append, *a, **k)

    async def acompress(self, *a: Any, **k: Any) -> Dict[str, Any]:
        return await asyncio.to_thread(self.compress, *a, **k)

    async def acontext(self, *a: Any, **k: Any) -> ContextWindow:
        return await asyncio.to_thread(self.context, *a, **k)

    async def aquery(self, *a: Any, **k: Any) -> QueryResult:
        return await asyncio.to_thread(self.query, *a, **k)

    async def agrep(self, *a: Any, **k: Any) -> List[GrepHit]:
        return await asyncio.to_thread(self.grep, *a, **k)

    async def apeek(self, *a: Any, **k: Any) -> Node:
        return await asyncio.to_thread(self.peek, *a, **k)

    async def aforget(self, *a: Any, **k: Any) -> Dict[str, Any]:
        return await asyncio.to_thread(self.forget, *a, **k)

    async def astats(self) -> Dict[str, Any]:
        return await asyncio.to_thread(self.stats)


def open(path: PathLike, config: Optional[PathLike] = None, **settings: Any) -> Db:  # noqa: A001
    """Opens (or creates) a store: a directory, or a `postgres://` URL. `config` is a strata
    TOML file; keyword settings are `SECTION_FIELD=value` as the `STRATA_SECTION_FIELD`
    variables take them (e.g. `model_sub="openai:gpt-4o-mini"`, `model_base_url=...`)."""
    return Db(path, config, **settings)


def tools(db: Db, scope: str) -> List[Callable[..., str]]:
    """strata's grep, peek, context and query over `scope` as plain callables that take and
    return strings, with docstrings: what `dspy.RLM(tools=...)` and most agent frameworks
    take."""

    def grep(pattern: str) -> str:
        """Search the context for passages matching `pattern` (BM25 over words). Returns up
        to 10 hits, one per line: node id, level, and the start of its text."""
        hits = db.grep(scope, pattern, limit=10)
        return "\n".join(f"{h.id} [{h.level}] {h.text[:200]}" for h in hits) or "(no hits)"

    def peek(node_id: str) -> str:
        """Read one node of the context, whole, by the id a grep hit or context gave."""
        return db.peek(node_id).text

    def context(budget: int = 2000) -> str:
        """An overview of the whole context within `budget` tokens."""
        return db.context(scope, budget=int(budget)).text

    def query(question: str) -> str:
        """Answer a question from the context, with citations (source and byte span)."""
        r = db.query(scope, question)
        lines = [r.answer if r.ready else f"(not ready, confidence {r.confidence:.2f}) {r.answer}"]
        lines += [f"[{c.source} {c.start}..{c.end}] {c.quote}" for c in r.citations]
        return "\n".join(lines)

    return [grep, peek, context, query]
