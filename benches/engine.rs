//! Micro-benchmarks of strata's hot paths, on the sample data in `data/`.
//!
//! ```text
//! cargo bench --bench engine               # everything (~2-3 minutes on 2 cores)
//! cargo bench --bench engine -- chunk      # one group
//! STRATA_BENCH_FLAT_MB=0.25,1,2,8 cargo bench --bench engine -- chunk_flat
//! ```
//!
//! Groups: `chunk` (semantic chunker, bytes/s), `chunk_flat` (the chunker on text without
//! whitespace or sentence ends, 1 MB of each kind by default), `offline` (extractive compressor on one
//! 400-token chunk and on one ~3,000-token SUMMARY group), `store` (sled `put_node` /
//! `get_live`), `index` (BM25 `grep` over a built engine), `context` (token-budgeted
//! windows on a warm engine) and `query` (the offline navigator, end to end).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;
use strata::chunk::{self, Structure};
use strata::model::offline;
use strata::model::{CompressRequest, Passage};
use strata::node::{Meta, Span, full_id};
use strata::{Config, Engine, Level, LevelChoice, NoProgress, Node, NodeId, Store, unix_now};

/// Chunk budget used by the engine's default configuration.
const CHUNK_TOKENS: usize = 400;

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data")
}

/// `data/docs/*.txt`, sorted by name.
fn doc_paths() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(data_dir().join("docs"))
        .expect("data/docs")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    v.sort();
    assert!(!v.is_empty(), "no .txt files in data/docs");
    v
}

/// At least 200 KB of real text: the sample documents, cycled, joined by blank lines.
fn corpus() -> &'static str {
    static CORPUS: OnceLock<String> = OnceLock::new();
    CORPUS.get_or_init(|| {
        let texts: Vec<String> = doc_paths()
            .iter()
            .map(|p| std::fs::read_to_string(p).expect("read doc"))
            .collect();
        let mut out = String::new();
        for t in texts.iter().cycle() {
            if out.len() >= 200_000 {
                break;
            }
            if !out.is_empty() {
                out.push_str("\n\n");
            }
            out.push_str(t);
        }
        out
    })
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .nresamples(10_000)
}

// ------------------------------------------------------------------------ chunking

fn bench_chunk(c: &mut Criterion) {
    let text = corpus();
    let mut g = c.benchmark_group("chunk");
    g.throughput(Throughput::Bytes(text.len() as u64));
    g.bench_function(BenchmarkId::new("document_400", text.len()), |b| {
        b.iter(|| chunk::chunk(black_box(text), Structure::Document, CHUNK_TOKENS))
    });
    g.finish();
}

/// Text without whitespace or sentence ends (issue 9), `bytes` long, of one kind.
fn flat_text(kind: &str, bytes: usize) -> String {
    // A fixed xorshift stream: the same text on every run.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n) as usize
    };
    const B64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let cjk: Vec<char> = "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跑".chars().collect();
    let words = [
        "harbour", "line", "council", "budget", "station", "the", "of", "a", "rail",
    ];
    let mut s = String::with_capacity(bytes + 8);
    match kind {
        "abc" => {
            while s.len() < bytes {
                s.push_str("abcdefghij");
            }
        }
        "letters" => {
            while s.len() < bytes {
                s.push(char::from(b'a' + next(26) as u8));
            }
        }
        "base64" => {
            while s.len() < bytes {
                s.push(char::from(B64[next(64)]));
            }
        }
        "one_char" => s = "a".repeat(bytes),
        "cjk" => {
            while s.len() < bytes {
                s.push(cjk[next(cjk.len() as u64)]);
            }
        }
        "giant_word" => {
            let prose = "The council met on Tuesday to discuss the harbour line. ";
            while s.len() < bytes / 4 {
                s.push_str(prose);
            }
            while s.len() < bytes * 3 / 4 {
                s.push(char::from(b'a' + next(26) as u8));
            }
            while s.len() < bytes {
                s.push_str(prose);
            }
        }
        "no_sentence_ends" => {
            while s.len() < bytes {
                s.push_str(words[next(words.len() as u64)]);
                s.push(' ');
            }
        }
        other => panic!("no flat text kind {other}"),
    }
    s
}

fn bench_chunk_flat(c: &mut Criterion) {
    let sizes: Vec<f64> = std::env::var("STRATA_BENCH_FLAT_MB")
        .unwrap_or_else(|_| "1".into())
        .split(',')
        .map(|v| {
            v.trim()
                .parse()
                .expect("STRATA_BENCH_FLAT_MB: sizes in MB, e.g. 0.25,1")
        })
        .collect();
    let mut g = c.benchmark_group("chunk_flat");
    for &mb in &sizes {
        let bytes = (mb * 1024.0 * 1024.0) as usize;
        for kind in [
            "abc",
            "letters",
            "base64",
            "one_char",
            "cjk",
            "giant_word",
            "no_sentence_ends",
        ] {
            let text = flat_text(kind, bytes);
            g.throughput(Throughput::Bytes(text.len() as u64));
            g.bench_function(BenchmarkId::new(kind, format!("{mb}MB")), |b| {
                b.iter(|| chunk::chunk(black_box(&text), Structure::Document, CHUNK_TOKENS))
            });
        }
    }
    g.finish();
}

// ------------------------------------------------------------------------ offline compressor

fn bench_offline(c: &mut Criterion) {
    let text = corpus();
    let chunks = chunk::chunk(text, Structure::Document, CHUNK_TOKENS);
    // The fullest chunk: as close to the 400-token budget as the text allows.
    let big = chunks.iter().max_by_key(|c| c.tokens).expect("chunks");
    let detailed = CompressRequest {
        level: Level::Detailed,
        passages: vec![Passage {
            text: text[big.start..big.end].to_string(),
            label: None,
        }],
        target_tokens: big.tokens.div_ceil(2),
        inputs: Default::default(),
        feedback: None,
        priority: Level::Detailed.as_u8(),
    };
    // A SUMMARY group: consecutive chunks (one passage each) up to ~3,000 tokens.
    let mut passages = Vec::new();
    let mut group_tokens = 0;
    for c in &chunks {
        if group_tokens >= 3_000 {
            break;
        }
        group_tokens += c.tokens;
        passages.push(Passage {
            text: text[c.start..c.end].to_string(),
            label: None,
        });
    }
    let summary = CompressRequest {
        level: Level::Summary,
        passages,
        target_tokens: group_tokens / 5,
        inputs: Default::default(),
        feedback: None,
        priority: Level::Summary.as_u8(),
    };

    let mut g = c.benchmark_group("offline");
    g.throughput(Throughput::Bytes(big.end as u64 - big.start as u64));
    g.bench_function(BenchmarkId::new("detailed_chunk_tokens", big.tokens), |b| {
        b.iter(|| offline::compress(black_box(&detailed)))
    });
    let bytes: usize = summary.passages.iter().map(|p| p.text.len()).sum();
    g.throughput(Throughput::Bytes(bytes as u64));
    g.bench_function(
        BenchmarkId::new("summary_group_tokens", group_tokens),
        |b| b.iter(|| offline::compress(black_box(&summary))),
    );
    g.finish();
}

// ------------------------------------------------------------------------ store

/// Realistic nodes: FULL chunks of the corpus and DETAILED-like nodes (half the text,
/// one child, the chunk's span), with the metadata a document chunk carries.
fn sample_nodes(now: u64) -> Vec<Node> {
    let text = corpus();
    let source = "data/docs/corpus.txt";
    let mut out = Vec::new();
    for c in chunk::chunk(text, Structure::Document, CHUNK_TOKENS) {
        let body = text[c.start..c.end].to_string();
        let span = Span {
            source: source.to_string(),
            start: c.start as u64,
            end: c.end as u64,
        };
        let meta = Meta {
            rounds: Vec::new(),
            speakers: Vec::new(),
            headings: c.headings.clone(),
            tags: None,
            time: None,
        };
        let full = Node {
            id: full_id("docs", source, c.start, c.end, &body),
            scope: "docs".into(),
            level: Level::Full,
            text: body.clone(),
            children: Vec::new(),
            citations: vec![span.clone()],
            tokens: c.tokens as u32,
            meta: meta.clone(),
            created_at: now,
            expires_at: None,
        };
        let mut half = body.len() / 2;
        while !body.is_char_boundary(half) {
            half += 1;
        }
        let mut did = full.id;
        did.0[0] ^= 0xff;
        let detailed = Node {
            id: did,
            scope: "docs".into(),
            level: Level::Detailed,
            text: body[..half].to_string(),
            children: vec![full.id],
            citations: vec![span],
            tokens: (c.tokens / 2) as u32,
            meta,
            created_at: now,
            expires_at: Some(now + 3600),
        };
        out.push(full);
        out.push(detailed);
    }
    out
}

fn bench_store(c: &mut Criterion) {
    let now = unix_now();
    let nodes = sample_nodes(now);
    let store = Store::temporary().expect("store");
    for n in &nodes {
        store.put_node(n).expect("put");
    }
    let mut g = c.benchmark_group("store");
    g.throughput(Throughput::Elements(1));

    // A new id every call (what a cold build does).
    let mut fresh = 0u64;
    g.bench_function("put_node_new", |b| {
        b.iter(|| {
            let mut n = nodes[(fresh as usize) % nodes.len()].clone();
            fresh += 1;
            n.id.0[24..].copy_from_slice(&fresh.to_le_bytes());
            store.put_node(black_box(&n)).expect("put");
        })
    });
    // Rewriting an existing node (a refresh after expiry).
    let mut i = 0usize;
    g.bench_function("put_node_overwrite", |b| {
        b.iter(|| {
            i = (i + 1) % nodes.len();
            store.put_node(black_box(&nodes[i])).expect("put");
        })
    });
    let ids: Vec<NodeId> = nodes.iter().map(|n| n.id).collect();
    let mut j = 0usize;
    g.bench_function("get_live_hit", |b| {
        b.iter(|| {
            j = (j + 1) % ids.len();
            let n = store.get_live(black_box(&ids[j]), now).expect("get");
            assert!(n.is_some());
            n
        })
    });
    let missing = NodeId([0x5a; 32]);
    g.bench_function("get_live_miss", |b| {
        b.iter(|| store.get_live(black_box(&missing), now).expect("get"))
    });
    g.finish();
}

// ------------------------------------------------------------------------ built engine

struct Warm {
    rt: tokio::runtime::Runtime,
    engine: Engine,
    now: u64,
}

/// One in-memory engine with `data/docs/*.txt` in scope `docs` and `data/debate.jsonl` in
/// scope `debate`, both fully compressed. Built once, shared by the index, context and
/// query groups.
fn warm() -> &'static Warm {
    static WARM: OnceLock<Warm> = OnceLock::new();
    WARM.get_or_init(|| {
        let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
        let now = unix_now();
        let engine = Engine::in_memory(Config::default()).expect("engine");
        engine
            .ingest_files("docs", None, &doc_paths(), now)
            .expect("ingest docs");
        engine
            .ingest_files("debate", None, &[data_dir().join("debate.jsonl")], now)
            .expect("ingest debate");
        for scope in ["docs", "debate"] {
            let r = rt
                .block_on(engine.compress(scope, now, &NoProgress))
                .expect("compress");
            assert!(r.failures.is_empty(), "{scope}: {:?}", r.failures);
            eprintln!(
                "warm engine: {scope}: {} nodes built in {} ms",
                r.nodes_built, r.elapsed_ms
            );
        }
        Warm { rt, engine, now }
    })
}

fn bench_index(c: &mut Criterion) {
    let w = warm();
    let mut g = c.benchmark_group("index");
    g.bench_function("grep_all_scopes", |b| {
        b.iter(|| {
            let hits = w
                .rt
                .block_on(
                    w.engine
                        .grep(&[], black_box("four freedoms speech"), &[], 10, w.now),
                )
                .expect("grep");
            assert!(!hits.is_empty());
            hits
        })
    });
    let docs = vec!["docs".to_string()];
    g.bench_function("grep_docs_full_level", |b| {
        b.iter(|| {
            w.rt.block_on(w.engine.grep(
                &docs,
                black_box("four freedoms speech"),
                &[Level::Full],
                10,
                w.now,
            ))
            .expect("grep")
        })
    });
    g.finish();
}

fn bench_context(c: &mut Criterion) {
    let w = warm();
    let mut g = c.benchmark_group("context");
    for (name, choice) in [
        ("debate_auto_2000", LevelChoice::Auto),
        ("debate_summary_2000", LevelChoice::Fixed(Level::Summary)),
        ("debate_abstract_2000", LevelChoice::Fixed(Level::Abstract)),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| {
                let win =
                    w.rt.block_on(w.engine.context("debate", choice, 2000, w.now, &NoProgress))
                        .expect("context");
                assert!(win.tokens <= 2000);
                win
            })
        });
    }
    g.bench_function("docs_auto_2000", |b| {
        b.iter(|| {
            w.rt.block_on(
                w.engine
                    .context("docs", LevelChoice::Auto, 2000, w.now, &NoProgress),
            )
            .expect("context")
        })
    });
    g.finish();
}

fn bench_query(c: &mut Criterion) {
    let w = warm();
    let mut g = c.benchmark_group("query");
    let all: Vec<String> = Vec::new();
    let debate = vec!["debate".to_string()];
    for (name, scopes, q) in [
        (
            "docs_four_freedoms",
            &all,
            "What is the first of the four freedoms in Roosevelt's 1941 address?",
        ),
        (
            "debate_fare_cap",
            &debate,
            "What did chen propose about fares?",
        ),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| {
                let r =
                    w.rt.block_on(
                        w.engine
                            .query(&strata::Ask::new(scopes, black_box(q), w.now)),
                    )
                    .expect("query");
                assert!(!r.citations.is_empty(), "{name}: no citations");
                r
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_chunk, bench_chunk_flat, bench_offline, bench_store, bench_index, bench_context, bench_query
}
criterion_main!(benches);
