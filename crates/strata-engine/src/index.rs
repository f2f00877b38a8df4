//! The full-text index (tantivy, BM25) over every level's text. Only this module knows
//! tantivy. The index is derived from the store and can be rebuilt from it at any time.
//! Its `pub` items are the engine's; outside the crate only tests and benches reach them
//! (`Engine::index`, feature `testing`).
#![cfg_attr(not(feature = "testing"), allow(unreachable_pub))]

use crate::error::{Error, Result};
use crate::level::Level;
use crate::node::{Node, NodeId};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use tantivy::collector::TopDocs;
use tantivy::query::{
    Bm25StatisticsProvider, BooleanQuery, BoostQuery, ConstScoreQuery, Occur, Query, TermQuery,
    TermSetQuery,
};
use tantivy::schema::{
    FAST, Field, INDEXED, IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing,
    TextOptions, Value,
};
use tantivy::{DocSet, IndexReader, IndexWriter, ReloadPolicy, Searcher, TantivyDocument, Term};

/// Documents of any of `scopes` (the `scope` field of `f`).
fn in_scopes(f: Fields, scopes: &[String]) -> Box<dyn Query> {
    any_of(scopes.iter().map(|x| Term::from_field_text(f.scope, x)))
}

/// Documents holding any of `terms`, each scoring 1 (as tantivy's `TermSetQuery` does). A
/// handful of terms (a scope, the levels asked for) is a union of term queries: a
/// `TermSetQuery` builds a finite-state transducer for its set, with a 10,000-entry
/// registry, for every search (a tenth of a `strata query` process went there). A large
/// set (node ids) keeps the transducer.
fn any_of(terms: impl IntoIterator<Item = Term>) -> Box<dyn Query> {
    const SMALL: usize = 16;
    let terms: Vec<Term> = terms.into_iter().collect();
    if terms.len() > SMALL {
        return Box::new(TermSetQuery::new(terms));
    }
    let union: Vec<(Occur, Box<dyn Query>)> = terms
        .into_iter()
        .map(|t| {
            let q: Box<dyn Query> = Box::new(TermQuery::new(t, IndexRecordOption::Basic));
            (Occur::Should, q)
        })
        .collect();
    Box::new(ConstScoreQuery::new(
        Box::new(BooleanQuery::new(union)),
        1.0,
    ))
}

fn ierr(e: impl std::fmt::Display) -> Error {
    Error::Index(e.to_string())
}

#[derive(Clone, Copy)]
struct Fields {
    id: Field,
    scope: Field,
    level: Field,
    source: Field,
    round: Field,
    speaker: Field,
    text: Field,
    /// How many tokens the document's `text` holds (exactly as tantivy counts them), so
    /// that BM25's average length can be taken over the live documents only.
    tokens: Field,
}

/// How segments merge. Every append commits a segment of a few documents; tantivy's default
/// policy puts every segment under 10,000 documents in one level and merges the whole level
/// whenever it holds eight, so a debate of n turns rewrote O(n) index bytes per turn
/// (`cargo bench --bench appends`). Levels from 64 documents up keep that to the layers
/// above a segment: O(log n) rewrites per document, at most seven segments waiting per level.
fn merge_policy() -> tantivy::indexer::LogMergePolicy {
    let mut p = tantivy::indexer::LogMergePolicy::default();
    p.set_min_layer_size(64);
    p
}

fn schema() -> (Schema, Fields) {
    let mut b = Schema::builder();
    // Frequencies, no positions: every search is a union of term queries scored by BM25
    // (which reads frequencies and field norms); nothing asks for a phrase, and positions
    // were 40 % of the index (4.4 of 11.2 MB on the 12 MB corpus).
    let text_opts = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer("en_stem")
            .set_index_option(IndexRecordOption::WithFreqs),
    );
    let f = Fields {
        // The node id's 32 bytes (not its 64 hex digits): half the id terms and stored bytes.
        id: b.add_bytes_field("id", INDEXED | STORED),
        scope: b.add_text_field("scope", STRING),
        level: b.add_u64_field("level", INDEXED),
        source: b.add_text_field("source", STRING),
        round: b.add_u64_field("round", INDEXED),
        speaker: b.add_text_field("speaker", STRING),
        text: b.add_text_field("text", text_opts),
        tokens: b.add_u64_field("tokens", FAST),
    };
    (b.build(), f)
}

/// Weight of the coverage term of a search (times the term's idf).
const COVERAGE_WEIGHT: f64 = 1.0;

/// Hits collected beyond a search's limit, so that ties at the limit are broken by node id.
const TIE_MARGIN: usize = 16;

/// How much more a name in the question weighs than another word.
pub(crate) const NAME_BOOST: f64 = 2.0;

/// A BM25 hit.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Hit {
    pub id: NodeId,
    pub score: f32,
}

/// A text as a search sees it, analysed once ([`Index::analyse_query`]): its terms and
/// which of them are names.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Analysed {
    /// Stop words dropped, stemmed, deduplicated, in order of first appearance.
    pub(crate) terms: Vec<String>,
    /// Terms of the names the text writes with a capital (they weigh [`NAME_BOOST`]).
    pub(crate) names: std::collections::HashSet<String>,
    /// Terms naming members of a kind the question asks for a set of ("What sports …" →
    /// skiing, volleyball …: `text::kinds`), not in `terms`; searched at [`KIND_BOOST`],
    /// with no coverage credit.
    pub(crate) kinds: Vec<String>,
    /// The nouns whose kinds those are ("sport").
    pub(crate) kinds_of: Vec<String>,
}

/// What a term naming a member of the asked-for kind weighs in a search, against a term
/// of the question itself: half. Not fitted: on REALTALK `dev` (scripts/realtalk) 0.3, 0.5
/// and 1.0 held a gold message in the 1,000-token `--for` window for 68.0, 68.9 and 68.9 %
/// of questions, against 66.9 % without kinds (docs/EVAL.md).
const KIND_BOOST: f64 = 0.5;

/// What to search.
#[derive(Clone, Debug)]
pub(crate) struct Grep<'a> {
    pub(crate) query: &'a Analysed,
    /// Restrict to these scopes (empty = all).
    pub(crate) scopes: &'a [String],
    /// Restrict to these levels (empty = all).
    pub(crate) levels: &'a [Level],
    /// Restrict to these nodes (None = no restriction).
    pub(crate) within: Option<&'a [NodeId]>,
    pub(crate) limit: usize,
}

/// [`Index::space`]: bytes of the live segments by component.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct IndexSpace {
    pub total: u64,
    /// Term dictionaries.
    pub terms: u64,
    pub postings: u64,
    /// Term positions (phrase queries; none since the schema indexes frequencies only).
    pub positions: u64,
    /// Fast fields and field norms.
    pub fast_fields: u64,
    /// The document store (stored fields).
    pub stored: u64,
    pub deletes: u64,
}

pub struct Index {
    index: tantivy::Index,
    reader: IndexReader,
    /// Created on first write: opening a writer takes tantivy's directory lock, which a
    /// read-only command (`query`, `context`) should never need.
    writer: Mutex<Option<IndexWriter>>,
    f: Fields,
    /// Tokens of the live documents' text, for the searcher generation it was counted on.
    live_tokens: Mutex<Option<(u64, u64)>>,
    /// Live documents and their tokens per set of scopes searched, for the searcher
    /// generation they were counted on ([`LiveStats`]).
    scope_totals: Mutex<ScopeTotalsCache>,
    /// FULL chunks' sentences as analysed for scoring ([`Index::sentences_of`]).
    sentences: Mutex<SentenceCache>,
    /// Opened by [`Index::open_overlay`]: every write stays in memory.
    overlay: bool,
}

/// A sentence of a chunk as the navigator scores it: its span without the surrounding
/// white space (byte offsets into the chunk's text), and its terms as the
/// index sees them, in order, repeats kept ([`Index::analyze_all`]). Sentences that are
/// blank or questions are left out (they never answer).
#[derive(Debug)]
pub(crate) struct ScoredSentence {
    pub trimmed: (usize, usize),
    pub terms: Vec<String>,
}

/// FULL chunks' analysed sentences by chunk id, least recently used first out past
/// [`SENTENCE_CACHE_BYTES`]. A FULL chunk's id hashes its text, so an entry never goes
/// stale; the analyser is the schema's, the same for every index of this strata.
#[derive(Default)]
struct SentenceCache {
    entries: HashMap<NodeId, (Arc<[ScoredSentence]>, usize, u64)>,
    bytes: usize,
    tick: u64,
}

/// What the sentence cache may hold (about: strings' bytes and a fixed cost per item).
const SENTENCE_CACHE_BYTES: usize = 64 << 20;

impl SentenceCache {
    fn get(&mut self, id: &NodeId) -> Option<Arc<[ScoredSentence]>> {
        self.tick += 1;
        let tick = self.tick;
        self.entries.get_mut(id).map(|e| {
            e.2 = tick;
            e.0.clone()
        })
    }

    fn put(&mut self, id: NodeId, v: Arc<[ScoredSentence]>) {
        let size = 64
            + v.iter()
                .map(|s| 48 + s.terms.iter().map(|t| 24 + t.len()).sum::<usize>())
                .sum::<usize>();
        if size > SENTENCE_CACHE_BYTES / 4 {
            return;
        }
        self.tick += 1;
        if let Some(old) = self.entries.insert(id, (v, size, self.tick)) {
            self.bytes -= old.1;
        }
        self.bytes += size;
        if self.bytes > SENTENCE_CACHE_BYTES {
            // Evict the older half of the entries (by last use) at once: O(n log n) per
            // n / 2 insertions.
            let mut ticks: Vec<u64> = self.entries.values().map(|e| e.2).collect();
            ticks.sort_unstable();
            let cut = ticks[ticks.len() / 2];
            self.entries.retain(|_, e| e.2 >= cut);
            self.bytes = self.entries.values().map(|e| e.1).sum();
        }
    }
}

/// BM25 statistics over the live documents only. tantivy's own count the documents a
/// segment still holds after they were deleted (until a merge), so two indexes of the same
/// nodes with different histories — a replica that followed every change, one rebuilt
/// from the store — would rank the same question differently. These depend only on the
/// documents that are there.
///
/// And only on the scopes searched, when a search names them: a debate's answers do not
/// change because another debate, or another tenant's documents, were loaded into the
/// same store (its word statistics are its own), and the ranking tells nothing of what
/// other scopes hold.
struct LiveStats<'a> {
    index: &'a Index,
    searcher: &'a Searcher,
    /// The scopes searched; empty: every scope.
    scopes: &'a [String],
    /// Document frequencies counted for this search (the coverage term's idf and BM25's
    /// weight read each term's once).
    df: std::cell::RefCell<HashMap<Term, u64>>,
}

impl<'a> LiveStats<'a> {
    fn new(index: &'a Index, searcher: &'a Searcher, scopes: &'a [String]) -> Self {
        LiveStats {
            index,
            searcher,
            scopes,
            df: Default::default(),
        }
    }

    /// The BM25 inverse document frequency of an analysed term of the text field.
    fn idf(&self, term: &str) -> f64 {
        let n = self.total_num_docs().unwrap_or(0).max(1) as f64;
        let df = self
            .doc_freq(&Term::from_field_text(self.index.f.text, term))
            .unwrap_or(0) as f64;
        ((n - df + 0.5) / (df + 0.5) + 1.0).ln()
    }

    /// Live documents of the scopes and their tokens, counted once per searcher
    /// generation and set of scopes.
    fn scope_totals(&self) -> tantivy::Result<(u64, u64)> {
        let generation = self.searcher.generation().generation_id();
        let mut key = self.scopes.to_vec();
        key.sort_unstable();
        key.dedup();
        {
            let cache = self.index.scope_totals.lock().expect("poisoned");
            if cache.0 == generation
                && let Some(t) = cache.1.get(&key)
            {
                return Ok(*t);
            }
        }
        let totals = self
            .searcher
            .search(&in_scopes(self.index.f, self.scopes), &ScopeTotals)?;
        let mut cache = self.index.scope_totals.lock().expect("poisoned");
        if cache.0 != generation {
            *cache = (generation, HashMap::new());
        }
        // A bound on what a long-lived process keeps: every set of scopes asked since the
        // index last changed.
        if cache.1.len() >= 4096 {
            cache.1.clear();
        }
        cache.1.insert(key, totals);
        Ok(totals)
    }
}

impl Bm25StatisticsProvider for LiveStats<'_> {
    fn total_num_tokens(&self, field: Field) -> tantivy::Result<u64> {
        if field != self.index.f.text {
            return Bm25StatisticsProvider::total_num_tokens(self.searcher, field);
        }
        if !self.scopes.is_empty() {
            return Ok(self.scope_totals()?.1);
        }
        let generation = self.searcher.generation().generation_id();
        let mut cache = self.index.live_tokens.lock().expect("poisoned");
        if let Some((g, n)) = *cache
            && g == generation
        {
            return Ok(n);
        }
        let mut total = 0u64;
        for seg in self.searcher.segment_readers() {
            let tokens = seg.fast_fields().u64("tokens")?;
            let alive = seg.alive_bitset();
            for doc in 0..seg.max_doc() {
                if alive.is_none_or(|a| a.is_alive(doc)) {
                    total += tokens.first(doc).unwrap_or(0);
                }
            }
        }
        *cache = Some((generation, total));
        Ok(total)
    }

    fn total_num_docs(&self) -> tantivy::Result<u64> {
        if !self.scopes.is_empty() {
            return Ok(self.scope_totals()?.0);
        }
        Ok(self.searcher.num_docs())
    }

    fn doc_freq(&self, term: &Term) -> tantivy::Result<u64> {
        if let Some(&n) = self.df.borrow().get(term) {
            return Ok(n);
        }
        let n = if self.scopes.is_empty() {
            live_doc_freq(self.searcher, term)?
        } else {
            let q = BooleanQuery::new(vec![
                (Occur::Must, in_scopes(self.index.f, self.scopes)),
                (
                    Occur::Must,
                    Box::new(TermQuery::new(term.clone(), IndexRecordOption::Basic)),
                ),
            ]);
            self.searcher.search(&q, &tantivy::collector::Count)? as u64
        };
        self.df.borrow_mut().insert(term.clone(), n);
        Ok(n)
    }
}

/// A searcher generation, and per set of scopes (sorted, distinct) their live documents
/// and tokens counted on it.
type ScopeTotalsCache = (u64, HashMap<Vec<String>, (u64, u64)>);

/// Counts the live documents a query matches and sums their `tokens`.
struct ScopeTotals;

impl tantivy::collector::Collector for ScopeTotals {
    type Fruit = (u64, u64);
    type Child = ScopeTotalsSegment;

    fn for_segment(
        &self,
        _: tantivy::SegmentOrdinal,
        seg: &tantivy::SegmentReader,
    ) -> tantivy::Result<ScopeTotalsSegment> {
        Ok(ScopeTotalsSegment {
            tokens: seg.fast_fields().u64("tokens")?,
            totals: (0, 0),
        })
    }

    fn requires_scoring(&self) -> bool {
        false
    }

    fn merge_fruits(&self, parts: Vec<(u64, u64)>) -> tantivy::Result<(u64, u64)> {
        Ok(parts
            .into_iter()
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1)))
    }
}

struct ScopeTotalsSegment {
    tokens: tantivy::columnar::Column<u64>,
    totals: (u64, u64),
}

impl tantivy::collector::SegmentCollector for ScopeTotalsSegment {
    type Fruit = (u64, u64);

    fn collect(&mut self, doc: tantivy::DocId, _: tantivy::Score) {
        self.totals.0 += 1;
        self.totals.1 += self.tokens.first(doc).unwrap_or(0);
    }

    fn harvest(self) -> (u64, u64) {
        self.totals
    }
}

/// How many live documents hold `term`.
fn live_doc_freq(searcher: &Searcher, term: &Term) -> tantivy::Result<u64> {
    let mut n = 0u64;
    for seg in searcher.segment_readers() {
        let inverted = seg.inverted_index(term.field())?;
        match seg.alive_bitset() {
            None => n += u64::from(inverted.doc_freq(term)?),
            Some(alive) => {
                if let Some(mut postings) =
                    inverted.read_postings(term, IndexRecordOption::Basic)?
                {
                    let mut doc = postings.doc();
                    while doc != tantivy::TERMINATED {
                        n += u64::from(alive.is_alive(doc));
                        doc = postings.advance();
                    }
                }
            }
        }
    }
    Ok(n)
}

impl Index {
    /// Opens the index in `dir`, creating it if missing. Returns whether it was created
    /// (then the caller rebuilds it from the store).
    pub fn open(dir: &Path) -> Result<(Index, bool)> {
        let (schema, f) = schema();
        let exists = dir.join("meta.json").exists();
        let index = if exists {
            match tantivy::Index::open_in_dir(dir) {
                Ok(i) if i.schema() == schema => i,
                // Unreadable or from another schema: it is derived data, so start over.
                _ => {
                    std::fs::remove_dir_all(dir).map_err(ierr)?;
                    return Self::create(dir, schema, f);
                }
            }
        } else {
            return Self::create(dir, schema, f);
        };
        Ok((Self::from_index(index, f)?, false))
    }

    /// The index in `dir` if [`Index::open`] would open it as it is (instead of starting
    /// over): it exists, tantivy reads it, and its schema is this strata's. `None`
    /// otherwise; nothing is written either way.
    pub(crate) fn open_existing(dir: &Path) -> Result<Option<Index>> {
        let (schema, f) = schema();
        if !dir.join("meta.json").exists() {
            return Ok(None);
        }
        match tantivy::Index::open_in_dir(dir) {
            Ok(i) if i.schema() == schema => Ok(Some(Self::from_index(i, f)?)),
            _ => Ok(None),
        }
    }

    fn create(dir: &Path, schema: Schema, f: Fields) -> Result<(Index, bool)> {
        std::fs::create_dir_all(dir).map_err(|source| Error::Io {
            path: dir.to_path_buf(),
            err: source,
        })?;
        let index = tantivy::Index::create_in_dir(dir, schema).map_err(ierr)?;
        Ok((Self::from_index(index, f)?, true))
    }

    /// The index in `dir` as [`Index::open_existing`] would open it, but every write to it
    /// (upserts, deletes, commits) kept in memory and lost at drop: the disk is read,
    /// never written ([`overlay::Overlay`]). For a command that only reads when a writer
    /// left index work pending: applied here, its searches see every stored node.
    pub(crate) fn open_overlay(dir: &Path) -> Result<Option<Index>> {
        let (schema, f) = schema();
        if !dir.join("meta.json").exists() {
            return Ok(None);
        }
        let directory = overlay::Overlay::open(dir).map_err(ierr)?;
        match tantivy::Index::open(directory) {
            Ok(i) if i.schema() == schema => {
                let mut index = Self::from_index(i, f)?;
                index.overlay = true;
                Ok(Some(index))
            }
            _ => Ok(None),
        }
    }

    /// Whether writes to this index stay in memory ([`Index::open_overlay`]).
    pub(crate) fn is_overlay(&self) -> bool {
        self.overlay
    }

    /// An index in memory (tests, benchmarks).
    pub fn in_memory() -> Result<Index> {
        let (schema, f) = schema();
        Self::from_index(tantivy::Index::create_in_ram(schema), f)
    }

    fn from_index(index: tantivy::Index, f: Fields) -> Result<Index> {
        // The same terms as tantivy's `en_stem`, stems remembered (`index/stem.rs`).
        index.tokenizers().register("en_stem", stem::analyzer());
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(ierr)?;
        Ok(Index {
            index,
            reader,
            writer: Mutex::new(None),
            f,
            live_tokens: Mutex::new(None),
            scope_totals: Mutex::new((u64::MAX, HashMap::new())),
            sentences: Mutex::new(SentenceCache::default()),
            overlay: false,
        })
    }

    fn with_writer<T>(&self, op: impl FnOnce(&mut IndexWriter) -> Result<T>) -> Result<T> {
        let mut guard = self.writer.lock().expect("index writer lock poisoned");
        if guard.is_none() {
            let w: IndexWriter = self
                .index
                .writer_with_num_threads(1, 64_000_000)
                .map_err(ierr)?;
            if self.overlay {
                // A commit in memory must not merge the segments on disk into memory.
                w.set_merge_policy(Box::new(tantivy::indexer::NoMergePolicy));
            } else {
                w.set_merge_policy(Box::new(merge_policy()));
            }
            *guard = Some(w);
        }
        op(guard.as_mut().expect("just set"))
    }

    /// Adds or replaces nodes (by id). Visible after [`Index::commit`].
    pub fn upsert(&self, nodes: &[Node]) -> Result<()> {
        let f = self.f;
        let mut analyzer = self.index.tokenizer_for_field(f.text).map_err(ierr)?;
        self.with_writer(|w| {
            for n in nodes {
                w.delete_term(Term::from_field_bytes(f.id, &n.id.0));
                let mut doc = TantivyDocument::default();
                doc.add_bytes(f.id, &n.id.0);
                doc.add_text(f.scope, &n.scope);
                doc.add_u64(f.level, n.level.as_u8() as u64);
                let mut sources: Vec<&str> =
                    n.citations.iter().map(|s| s.source.as_str()).collect();
                sources.dedup();
                for s in sources.into_iter().take(64) {
                    doc.add_text(f.source, s);
                }
                for r in &n.meta.rounds {
                    doc.add_u64(f.round, *r as u64);
                }
                for s in &n.meta.speakers {
                    doc.add_text(f.speaker, s);
                }
                let mut texts: Vec<&str> = vec![&n.text];
                // Who, when and where: a question naming a speaker, a round or a document
                // ("what did chen propose", "Kennedy's 1961 address") routes on these.
                let label = crate::node::context_label(n);
                if !label.is_empty() {
                    texts.push(&label);
                }
                if let Some(t) = &n.meta.tags {
                    // METADATA nodes are routed by their tags.
                    texts.extend(
                        t.keywords
                            .iter()
                            .chain(&t.entities)
                            .chain(&t.numbers)
                            .chain(&t.dates)
                            .map(String::as_str),
                    );
                }
                let mut tokens = 0u64;
                for t in texts {
                    doc.add_text(f.text, t);
                    let mut stream = analyzer.token_stream(t);
                    while stream.advance() {
                        tokens += 1;
                    }
                }
                doc.add_u64(f.tokens, tokens);
                w.add_document(doc).map_err(ierr)?;
            }
            Ok(())
        })
    }

    pub fn delete(&self, ids: &[NodeId]) -> Result<()> {
        let f = self.f;
        self.with_writer(|w| {
            for id in ids {
                w.delete_term(Term::from_field_bytes(f.id, &id.0));
            }
            Ok(())
        })
    }

    pub fn delete_all(&self) -> Result<()> {
        self.with_writer(|w| w.delete_all_documents().map(|_| ()).map_err(ierr))
    }

    /// Makes every write so far durable and visible to searches.
    pub fn commit(&self) -> Result<()> {
        let mut guard = self.writer.lock().expect("index writer lock poisoned");
        if let Some(w) = guard.as_mut() {
            w.commit().map_err(ierr)?;
            self.reader.reload().map_err(ierr)?;
        }
        Ok(())
    }

    /// Rewrites every segment that holds deleted documents and removes the files no
    /// segment uses: a deleted document is unsearchable once committed, but its terms stay
    /// in its segment's files until a merge (a forget wants them gone from the disk too).
    pub fn purge_deleted(&self) -> Result<()> {
        let segments: Vec<tantivy::index::SegmentId> = self
            .index
            .searchable_segment_metas()
            .map_err(ierr)?
            .into_iter()
            .filter(|m| m.has_deletes())
            .map(|m| m.id())
            .collect();
        if segments.is_empty() {
            return Ok(());
        }
        self.with_writer(|w| {
            w.merge(&segments).wait().map_err(ierr)?;
            w.garbage_collect_files().wait().map_err(ierr)?;
            Ok(())
        })?;
        self.reader.reload().map_err(ierr)
    }

    /// Deleted documents the index's files still hold (until a merge); for tests.
    #[cfg(feature = "testing")]
    pub fn deleted_docs(&self) -> u64 {
        self.reader
            .searcher()
            .segment_readers()
            .iter()
            .map(|r| u64::from(r.num_deleted_docs()))
            .sum()
    }

    /// Where the index's bytes go (tantivy's own accounting of its live segments).
    pub fn space(&self) -> Result<IndexSpace> {
        let u = self.reader.searcher().space_usage().map_err(ierr)?;
        let mut s = IndexSpace::default();
        for seg in u.segments() {
            s.terms += seg.termdict().total().get_bytes();
            s.postings += seg.postings().total().get_bytes();
            s.positions += seg.positions().total().get_bytes();
            s.fast_fields +=
                seg.fast_fields().total().get_bytes() + seg.fieldnorms().total().get_bytes();
            s.stored += seg.store().total().get_bytes();
            s.deletes += seg.deletes().get_bytes();
        }
        s.total = u.total().get_bytes();
        Ok(s)
    }

    /// Number of indexed nodes.
    pub fn n_docs(&self) -> u64 {
        self.reader.searcher().num_docs()
    }

    /// The query's terms as the index sees them (lower-cased, stemmed), stop words removed,
    /// duplicates removed, in order of first appearance.
    pub fn analyze(&self, text: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let Ok(mut analyzer) = self.index.tokenizer_for_field(self.f.text) else {
            return out;
        };
        // Stop words are judged on the surface form, before stemming.
        let filtered: Vec<String> = crate::text::content_words(text).collect();
        for w in filtered {
            let mut stream = analyzer.token_stream(&w);
            while stream.advance() {
                let t = stream.token().text.clone();
                if !out.contains(&t) {
                    out.push(t);
                }
            }
        }
        out
    }

    /// Terms of the names in a question: words written with a capital that are not the
    /// question's first word (nor a stop word such as "I"). Query-time normalisation: the
    /// names carry a question, its other words may be paraphrased.
    pub fn name_terms(&self, text: &str) -> std::collections::HashSet<String> {
        let mut out = std::collections::HashSet::new();
        let mut first = true;
        for w in text.split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '-')) {
            if w.is_empty() {
                continue;
            }
            let capital = w.chars().next().is_some_and(char::is_uppercase);
            if capital && !first && !crate::text::is_stopword(&w.to_lowercase()) {
                out.extend(self.analyze(w));
            }
            first = false;
        }
        out
    }

    /// `text` analysed for searching: its terms and its names, once.
    pub(crate) fn analyse_query(&self, text: &str) -> Analysed {
        let terms = self.analyze(text);
        let (mut kinds, mut kinds_of) = (Vec::new(), Vec::new());
        let mut seen: HashSet<String> = terms.iter().cloned().collect();
        for head in crate::text::question::set_heads(text) {
            let Some(noun) = crate::text::kinds::noun(&head) else {
                continue;
            };
            kinds_of.push(noun.to_string());
            for m in crate::text::kinds::members(noun).into_iter().flatten() {
                for t in self.analyze(m) {
                    if seen.insert(t.clone()) {
                        kinds.push(t);
                    }
                }
            }
        }
        Analysed {
            terms,
            names: self.name_terms(text),
            kinds,
            kinds_of,
        }
    }

    /// The pairs of terms of `text` that stand side by side in it, as the index sees them:
    /// no stop word and no punctuation but a hyphen between them ("stadium roof" in "the
    /// stadium roof is late", "start time" in "start-time"; not "arts, culture").
    pub(crate) fn adjacent_pairs(&self, text: &str) -> BTreeSet<(String, String)> {
        let mut out = BTreeSet::new();
        let Ok(mut analyzer) = self.index.tokenizer_for_field(self.f.text) else {
            return out;
        };
        let mut stream = analyzer.token_stream(text);
        // (term, position, where it ends in `text`)
        let mut last: Option<(String, usize, usize)> = None;
        while stream.advance() {
            let t = stream.token();
            // Stop words are judged on the surface form, as in `analyze`.
            let surface = text.get(t.offset_from..t.offset_to).unwrap_or_default();
            if crate::text::content_words(surface).next().is_none() {
                last = None;
                continue;
            }
            if let Some((w, at, end)) = last.take()
                && t.position == at + 1
                && text
                    .get(end..t.offset_from)
                    .is_some_and(|gap| gap.chars().all(|c| c.is_whitespace() || c == '-'))
            {
                out.insert((w, t.text.clone()));
            }
            last = Some((t.text.clone(), t.position, t.offset_to));
        }
        out
    }

    /// Every term of `text` as the index sees it, in order, repeats kept (for term
    /// frequencies).
    pub fn analyze_all(&self, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        let Ok(mut analyzer) = self.index.tokenizer_for_field(self.f.text) else {
            return out;
        };
        let mut stream = analyzer.token_stream(text);
        while stream.advance() {
            out.push(stream.token().text.clone());
        }
        out
    }

    /// The sentences of `n`'s text as the navigator scores them ([`ScoredSentence`]),
    /// analysed once per FULL chunk: the result is cached (bounded, least recently used
    /// out) by the chunk's id, which hashes its text. Other levels are analysed each time.
    pub(crate) fn sentences_of(&self, n: &Node) -> Arc<[ScoredSentence]> {
        let cache = n.level == Level::Full;
        if cache
            && let Some(v) = self
                .sentences
                .lock()
                .expect("sentence cache poisoned")
                .get(&n.id)
        {
            return v;
        }
        let v: Arc<[ScoredSentence]> = crate::text::sentences(&n.text)
            .into_iter()
            .filter_map(|s| {
                let raw = &n.text[s.start..s.end];
                let ts = s.start + (raw.len() - raw.trim_start().len());
                let te = s.end - (raw.len() - raw.trim_end().len());
                // A question quoted from the text never answers one.
                if te <= ts || crate::text::salience::is_question(raw) {
                    return None;
                }
                Some(ScoredSentence {
                    trimmed: (ts, te),
                    terms: self.analyze_all(raw),
                })
            })
            .collect();
        if cache {
            self.sentences
                .lock()
                .expect("sentence cache poisoned")
                .put(n.id, v.clone());
        }
        v
    }

    /// Inverse document frequency of an analysed term over the nodes of `scopes` (every
    /// level; empty: every scope), live documents only, as the BM25 statistics count
    /// ([`LiveStats`]).
    pub fn idf(&self, term: &str, scopes: &[String]) -> f64 {
        let s = self.reader.searcher();
        LiveStats::new(self, &s, scopes).idf(term)
    }

    /// Each of `terms`' idf among the FULL nodes of `scopes` (the text a question is asked
    /// of, not every scope of the store): a term those nodes never hold weighs like the
    /// rarest one. The BM25 formula of [`Index::idf`].
    pub(crate) fn scoped_idf(
        &self,
        terms: &[String],
        scopes: &[String],
    ) -> Result<std::collections::BTreeMap<String, f64>> {
        let f = self.f;
        let s = self.reader.searcher();
        let within = || -> Vec<(Occur, Box<dyn Query>)> {
            vec![
                (Occur::Must, in_scopes(f, scopes)),
                (
                    Occur::Must,
                    Box::new(TermQuery::new(
                        Term::from_field_u64(f.level, Level::Full.as_u8() as u64),
                        IndexRecordOption::Basic,
                    )),
                ),
            ]
        };
        let n = s
            .search(&BooleanQuery::new(within()), &tantivy::collector::Count)
            .map_err(ierr)? as f64;
        let mut out = std::collections::BTreeMap::new();
        for t in terms {
            let mut q = within();
            q.push((
                Occur::Must,
                Box::new(TermQuery::new(
                    Term::from_field_text(f.text, t),
                    IndexRecordOption::Basic,
                )),
            ));
            let df = s
                .search(&BooleanQuery::new(q), &tantivy::collector::Count)
                .map_err(ierr)? as f64;
            out.insert(t.clone(), ((n.max(1.0) - df + 0.5) / (df + 0.5) + 1.0).ln());
        }
        Ok(out)
    }

    /// BM25 search. Returns hits best first.
    pub(crate) fn search(&self, q: &Grep<'_>) -> Result<Vec<Hit>> {
        let terms = &q.query.terms;
        if terms.is_empty() || q.limit == 0 {
            return Ok(Vec::new());
        }
        let f = self.f;
        let searcher = self.reader.searcher();
        let stats = LiveStats::new(self, &searcher, q.scopes);
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::new();
        // BM25 per term, plus a coverage term (Lucene's old "coord"): each question term a
        // node contains adds its idf once more, so a node holding all the rare terms beats
        // a short node that repeats some of them (BM25 alone favours short nodes, and the
        // levels make many short ones).
        // Names the question spells with a capital weigh more: they are what it is about.
        let names = &q.query.names;
        let mut text_q: Vec<(Occur, Box<dyn Query>)> = Vec::with_capacity(2 * terms.len());
        for t in terms {
            let boost = if names.contains(t) { NAME_BOOST } else { 1.0 };
            let term = Term::from_field_text(f.text, t);
            let bm25: Box<dyn Query> = Box::new(BoostQuery::new(
                Box::new(TermQuery::new(term.clone(), IndexRecordOption::WithFreqs)),
                boost as f32,
            ));
            text_q.push((Occur::Should, bm25));
            let present: Box<dyn Query> = Box::new(ConstScoreQuery::new(
                Box::new(TermQuery::new(term, IndexRecordOption::Basic)),
                (COVERAGE_WEIGHT * boost * stats.idf(t)) as f32,
            ));
            text_q.push((Occur::Should, present));
        }
        for t in &q.query.kinds {
            let term = Term::from_field_text(f.text, t);
            text_q.push((
                Occur::Should,
                Box::new(BoostQuery::new(
                    Box::new(TermQuery::new(term, IndexRecordOption::WithFreqs)),
                    KIND_BOOST as f32,
                )),
            ));
        }
        clauses.push((Occur::Must, Box::new(BooleanQuery::new(text_q))));
        if !q.scopes.is_empty() {
            clauses.push((Occur::Must, in_scopes(f, q.scopes)));
        }
        if !q.levels.is_empty() {
            clauses.push((
                Occur::Must,
                any_of(
                    q.levels
                        .iter()
                        .map(|l| Term::from_field_u64(f.level, l.as_u8() as u64)),
                ),
            ));
        }
        if let Some(ids) = q.within {
            if ids.is_empty() {
                return Ok(Vec::new());
            }
            clauses.push((
                Occur::Must,
                any_of(ids.iter().map(|id| Term::from_field_bytes(f.id, &id.0))),
            ));
        }
        let query = BooleanQuery::new(clauses);
        // A few more than asked for, so that equal scores are ordered by node id below,
        // not by where each document happens to sit in this index's segments.
        let top = searcher
            .search_with_statistics_provider(
                &query,
                &TopDocs::with_limit(q.limit + TIE_MARGIN).order_by_score(),
                &stats,
            )
            .map_err(ierr)?;
        let mut hits = Vec::with_capacity(top.len());
        for (score, addr) in top {
            let doc: TantivyDocument = searcher.doc(addr).map_err(ierr)?;
            let id = doc
                .get_first(f.id)
                .and_then(|v| v.as_bytes())
                .and_then(|b| <[u8; 32]>::try_from(b).ok())
                .map(NodeId)
                .ok_or_else(|| Error::Index("a document without a node id".into()))?;
            hits.push(Hit { id, score });
        }
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
        hits.truncate(q.limit);
        Ok(hits)
    }
}

mod overlay;
mod stem;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod replica_ranking;
