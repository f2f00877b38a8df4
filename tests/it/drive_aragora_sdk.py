"""Drives `strata serve` with aragora's own Python SDK (`aragora-sdk` 2.11.0, unmodified):
every RLM method of the SDK, with the sync and the async client, each answer checked.

Run by tests/it/aragora_sdk.rs with the server's URL and token in STRATA_URL and
STRATA_TOKEN; the server already holds debate `d1` (4 turns about a tram) and document
scope `kb` (notes/tram.md). Prints one JSON line: the methods called and how often.
Any failed check raises, so the process exits non-zero with the reason on stderr.
"""

import asyncio
import inspect
import json
import os
import sys
import warnings

from aragora_sdk import AragoraAsyncClient, AragoraClient
from aragora_sdk.exceptions import NotFoundError, ValidationError

URL = os.environ["STRATA_URL"]
TOKEN = os.environ["STRATA_TOKEN"]
RIDERS = "How many daily riders did the audit confirm?"
STRATEGIES = ["auto", "peek", "grep", "partition_map", "summarize", "hierarchical"]
LEVELS = ["ABSTRACT", "SUMMARY", "DETAILED", "RAW", "summary", "Detailed"]
DOC = (
    "# Harbour\n\nThe ferry to Lindholm leaves every hour from the north pier.\n\n"
    "## Prices\n\nA single ticket costs four euros; children ride free.\n\n"
    "## Museum\n\nThe lighthouse museum opens at ten and is closed on Mondays.\n"
)
calls = {}


def check(cond, what, got):
    if not cond:
        raise AssertionError(f"{what}: got {json.dumps(got, default=str)[:2000]}")


async def call(name, fn, *args, **kwargs):
    """Calls an SDK method (sync or async) and counts it."""
    calls[name] = calls.get(name, 0) + 1
    r = fn(*args, **kwargs)
    if inspect.isawaitable(r):
        r = await r
    return r


async def expect_error(name, exc, fn, *args, **kwargs):
    try:
        await call(name, fn, *args, **kwargs)
    except exc as e:
        return e
    raise AssertionError(f"{name}{args}: expected {exc.__name__}")


def check_query(r, what):
    check(isinstance(r["answer"], str), f"{what}: answer", r)
    check(isinstance(r["ready"], bool), f"{what}: ready", r)
    check(isinstance(r["iteration"], int) and r["iteration"] >= 0, f"{what}: iteration", r)
    check(isinstance(r["refinement_history"], list), f"{what}: refinement_history", r)
    check(r["iteration"] == len(r["refinement_history"]), f"{what}: iteration = earlier answers", r)
    check(0.0 <= r["confidence"] <= 1.0, f"{what}: confidence", r)
    check(isinstance(r["nodes_examined"], list) and r["nodes_examined"], f"{what}: nodes_examined", r)
    check(r["tokens_processed"] > 0, f"{what}: tokens_processed", r)
    check(isinstance(r["sub_calls_made"], int), f"{what}: sub_calls_made", r)
    # Every word of an answer is a cited quote.
    for c in r["citations"]:
        check(c["quote"] in r["answer"], f"{what}: citation quote in the answer", r)


async def debates(c):
    d = c.debates
    r = await call("debates.compress", d.compress, "d1")
    check(r["original_tokens"] > 0, "compress: original_tokens", r)
    check(set(r["compressed_tokens"]) == {"ABSTRACT", "SUMMARY", "DETAILED"}, "compress: levels", r)
    for lv, t in r["compressed_tokens"].items():
        check(0 < t <= r["original_tokens"] * 2, f"compress: {lv} tokens", r)
        check(abs(r["compression_ratios"][lv] - t / r["original_tokens"]) < 1e-9, "ratio", r)
    check(r["levels_created"] == 5 and r["time_seconds"] >= 0, "compress: built", r)
    r = await call(
        "debates.compress", d.compress, "d1", target_levels=["ABSTRACT", "RAW"], compression_ratio=0.5
    )
    check(r["compressed_tokens"]["RAW"] == r["original_tokens"], "compress: RAW is the source", r)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for lv in LEVELS:
            r = await call("debates.get_context_level", d.get_context_level, "d1", lv)
            check(r["level"] == lv.upper(), f"context {lv}: level", r)
            check(r["content"] and r["token_count"] > 0, f"context {lv}: content", r)
            check(r["nodes"], f"context {lv}: nodes", r)
            for n in r["nodes"]:
                check(n["content"] and n["token_count"] > 0, f"context {lv}: node", r)
                check(isinstance(n["key_topics"], list), f"context {lv}: key_topics", r)
            check(any(n["key_topics"] for n in r["nodes"]), f"context {lv}: some topics", r)
        r = await call("debates.get_context_level", d.get_context_level, "d1", "RAW")
        check("38,000" in r["content"], "context RAW: the source text", r)
        r = await call("debates.get_refinement_status", d.get_refinement_status, "d1")
        check(r["debate_id"] == "d1" and r["status"] == "idle", "refinement-status", r)
        check(r["active_queries"] == 0 and r["cached_contexts"] == 5, "refinement-status: counts", r)
        await expect_error(
            "debates.get_context_level", NotFoundError, d.get_context_level, "nope", "SUMMARY"
        )

    for strategy in STRATEGIES:
        for level in ["ABSTRACT", "SUMMARY", "DETAILED", "RAW"]:
            r = await call(
                "debates.query_rlm", d.query_rlm, "d1", RIDERS, strategy=strategy, start_level=level
            )
            check_query(r, f"query {strategy}/{level}")
            check("38,000" in r["answer"], f"query {strategy}/{level}: the answer", r)
            check(r["strategy"] == strategy and r["start_level"] == level.replace("RAW", "FULL"), "echo", r)
    r = await call("debates.query_rlm", d.query_rlm, "d1", RIDERS, max_iterations=50)
    check(r["max_iterations"] == 10, "max_iterations clamped to 10", r)
    r = await call("debates.query_rlm", d.query_rlm, "d1", RIDERS, max_iterations=0)
    check(r["max_iterations"] == 1, "max_iterations clamped to 1", r)
    await expect_error("debates.query_rlm", ValidationError, d.query_rlm, "d1", "x" * 10_001)
    await expect_error("debates.query_rlm", ValidationError, d.query_rlm, "d1", RIDERS, strategy="magic")
    await expect_error("debates.query_rlm", ValidationError, d.query_rlm, "bad.id", RIDERS)
    await expect_error("debates.query_rlm", NotFoundError, d.query_rlm, "nope", RIDERS)
    r = await call("debates.get_refinement_status", d.get_refinement_status, "d1")
    check(r["last_query_time"] and r["last_query"]["query"] == RIDERS, "refinement-status: last query", r)


async def raw_routes(c):
    o = c.openapi
    r = await call(
        "openapi.request_post_api_v1_debates_by_debate_id_query_rlm",
        o.request_post_api_v1_debates_by_debate_id_query_rlm,
        "d1",
        body={"query": RIDERS, "strategy": "grep", "max_iterations": 3, "start_level": "detailed"},
    )
    check_query(r, "openapi query-rlm")
    check("38,000" in r["answer"], "openapi query-rlm: answer", r)
    r = await call(
        "openapi.request_post_api_v1_debates_by_debate_id_refinement_status",
        o.request_post_api_v1_debates_by_debate_id_refinement_status,
        "d1",
    )
    check(r["debate_id"] == "d1" and r["status"] == "idle", "openapi refinement-status", r)
    r = await call(
        "openapi.request_post_api_v1_knowledge_query_rlm",
        o.request_post_api_v1_knowledge_query_rlm,
        body={"workspace_id": "kb", "query": "Where will the depot be?", "max_nodes": 5000,
              "strategy": "auto"},
    )
    check(r["sources"] == ["notes/tram.md"] and "Millbrook" in r["answer"], "knowledge", r)
    check(isinstance(r["iteration"], int) and 0 <= r["confidence"] <= 1, "knowledge: fields", r)
    await expect_error(
        "openapi.request_post_api_v1_knowledge_query_rlm", ValidationError,
        o.request_post_api_v1_knowledge_query_rlm, body={"workspace_id": "k b", "query": "x"},
    )
    r = await call("openapi.request_post_api_v1_metrics_rlm", o.request_post_api_v1_metrics_rlm)
    check(r["queries"]["total"] > 0 and r["compressions"]["total"] > 0, "metrics/rlm", r)
    check(r["cache"]["hits"] + r["cache"]["misses"] > 0, "metrics/rlm: cache", r)
    check(0 <= r["refinement"]["successRate"] <= 1 and r["refinement"]["avgIterations"] > 0, "metrics/rlm", r)
    r = await call("openapi.request_post_api_v1_rlm_status", o.request_post_api_v1_rlm_status)
    check(r["available"] is True and r["provider"] == "strata", "rlm/status", r)


async def contexts(c):
    rl = c.rlm
    r = await call("rlm.compress", rl.compress, DOC, source_type="text")
    ctx = r["context_id"]
    check(ctx.startswith("ctx_"), "rlm.compress: context_id", r)
    cr = r["compression_result"]
    check(cr["original_tokens"] > 0 and cr["source_type"] == "text", "rlm.compress: result", r)
    check(cr["levels"]["ABSTRACT"]["nodes"] == 1, "rlm.compress: levels", r)
    r = await call("rlm.query", rl.query, ctx, "How much does a single ticket cost?", strategy="grep")
    check("four euros" in r["answer"], "rlm.query: answer", r)
    check(r["metadata"]["context_id"] == ctx and r["metadata"]["strategy"] == "grep", "rlm.query", r)
    await expect_error("rlm.query", NotFoundError, rl.query, "ctx_nope", "x")
    r = await call(
        "rlm.compress_and_query", rl.compress_and_query, DOC.replace("ten", "nine"),
        "When does the museum open?", strategy="peek",
    )
    check("nine" in r["query_result"]["answer"], "rlm.compress_and_query", r)
    check(r["context_id"].startswith("ctx_") and r["context_id"] != ctx, "compress_and_query: id", r)
    r = await call("rlm.list_contexts", rl.list_contexts)
    ids = [x["id"] for x in r["contexts"]]
    check({"d1", "kb", ctx} <= set(ids) and r["total"] == len(ids), "rlm.list_contexts", r)
    r = await call("rlm.get_stats", rl.get_stats)
    check(r["contexts"]["stored"] >= 4 and r["system"]["rlm_available"], "rlm.get_stats", r)
    r = await call("rlm.list_strategies", rl.list_strategies)
    check(set(STRATEGIES) <= set(r["strategies"]) and r["default"] == "auto", "strategies", r)
    firsts = {"top_down": "ABSTRACT", "bottom_up": "FULL", "targeted": "SUMMARY", "progressive": "ABSTRACT"}
    for mode, first in firsts.items():
        r = await call("rlm.stream", rl.stream, ctx, mode=mode)
        ch = r["chunks"]
        check(ch and r["total_chunks"] == len(ch) and r["mode"] == mode, f"stream {mode}", r)
        check(ch[0]["level"] == first and ch[-1]["is_final"], f"stream {mode}: order", r)
        check(all(x["content"] and x["token_count"] > 0 for x in ch), f"stream {mode}: chunks", r)
    r = await call("rlm.list_stream_modes", rl.list_stream_modes)
    check([m["mode"] for m in r["modes"]] == list(firsts), "stream modes", r)
    r = await call("rlm.get_codebase_health", rl.get_codebase_health)
    check(r["status"] == "available" and r["rlm"]["context_ready"], "codebase health", r)
    await expect_error("rlm.reset_codebase_health", NotImplementedError, rl.reset_codebase_health)


async def main():
    sync = AragoraClient(base_url=URL, api_key=TOKEN, max_retries=1)
    for part in (debates, raw_routes, contexts):
        await part(sync)
    sync.close()
    async with AragoraAsyncClient(base_url=URL, api_key=TOKEN, max_retries=1) as c:
        for part in (debates, raw_routes, contexts):
            await part(c)
    print(json.dumps({"calls": calls}))


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except Exception as e:  # one clear line for the Rust test to show
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        raise
