//! Sources in: validation, chunking outside the write lock, one store transaction per
//! input file, the reply only after the flush (docs/ARCHITECTURE.md, "Writes").

use super::Engine;
use crate::chunk::{self, Chunk, Structure};
use crate::error::{Error, Result};
use crate::level::Level;
use crate::node::{Meta, Node, NodeId, Span, full_id_at};
use crate::source::{self, InputFile, SourceInput};
use crate::store::{
    ChunkRef, ScopeHead, ScopeKind, SourceEntry, SourcePut, SourceRecord, SourceStep,
};
use crate::time::{Time, TimeSpan};
use serde::Serialize;
use std::collections::HashSet;
use std::path::PathBuf;

/// What an ingest did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct IngestReport {
    pub scope: String,
    pub kind: Option<ScopeKind>,
    pub files: usize,
    pub bytes: u64,
    pub added: usize,
    pub replaced: usize,
    pub unchanged: usize,
    pub removed: usize,
    pub chunks_written: usize,
}

impl Engine {
    /// Reads, validates and ingests files into `scope`. Every file is read and validated
    /// before anything is written: one bad file changes nothing.
    pub fn ingest_files(
        &self,
        scope: &str,
        kind: Option<ScopeKind>,
        paths: &[PathBuf],
        now: u64,
    ) -> Result<IngestReport> {
        self.ingest_files_at(scope, kind, paths, None, now)
    }

    /// [`Engine::ingest_files`] of documents written at `time` (`strata ingest --time`).
    /// A debate's turns carry their own times: a `time` for a debate is an error.
    pub fn ingest_files_at(
        &self,
        scope: &str,
        kind: Option<ScopeKind>,
        paths: &[PathBuf],
        time: Option<Time>,
        now: u64,
    ) -> Result<IngestReport> {
        if paths.is_empty() {
            return Err(Error::invalid("no files given"));
        }
        crate::id::scope(scope)?;
        let existing = self.store.get_scope_head(scope)?;
        let max = self.cfg.ingest.max_source_bytes();
        let mut files = Vec::with_capacity(paths.len());
        for p in paths {
            let k = kind
                .or(existing.as_ref().map(|s| s.kind))
                .unwrap_or_else(|| source::guess_kind(p));
            files.push(source::read_file(p, k, max)?);
        }
        let kinds: HashSet<_> = files.iter().map(|f| f.kind).collect();
        if kinds.len() > 1 {
            return Err(Error::invalid(
                "a scope holds either documents or one debate: pass --kind, or ingest them into separate scopes",
            ));
        }
        if let Some(t) = time {
            for f in &mut files {
                if f.kind == ScopeKind::Debate {
                    return Err(Error::invalid(format!(
                        "{} is a debate: a time given for the files is for documents; give each turn its own \"time\"",
                        f.path.display()
                    )));
                }
                for s in &mut f.sources {
                    s.time = Some(t);
                }
            }
        }
        self.ingest(scope, &files, now)
    }

    /// Ingests already-validated inputs. For a debate file, turns of an earlier version of
    /// the same file that are gone now are removed. Whatever the entry point, a source over
    /// `ingest.max_source_mb` and a debate transcript given as a document are refused here
    /// before anything is written.
    ///
    /// The write protocol (docs/ARCHITECTURE.md, "Writes"): chunking and token counting run
    /// before the write lock is taken; under the lock, each file is one store transaction
    /// (its sources' records, texts and FULL nodes, the chunks they replace, the scope's
    /// membership); the lock is released before the flush, and the report is returned only
    /// after the flush, so what it reports is durable. The index catches up afterwards from
    /// the durable pending set ([`Engine::sync_index`]).
    pub fn ingest(&self, scope: &str, files: &[InputFile], now: u64) -> Result<IngestReport> {
        crate::id::scope(scope)?;
        let max = self.cfg.ingest.max_source_bytes();
        for f in files {
            if !f.path.as_os_str().is_empty() {
                source::check_size(&f.path.display().to_string(), f.bytes, max)?;
            }
            for s in &f.sources {
                check_source(s)?;
                source::check_size(&s.id, s.text.len() as u64, max)?;
                if f.kind == ScopeKind::Doc {
                    source::check_not_debate(&s.id, &s.text)?;
                }
            }
        }
        self.ensure_room(files.iter().map(|f| f.bytes).sum())?;
        self.writing()?;
        let prepared: Vec<Vec<Option<Vec<Chunk>>>> = files
            .iter()
            .map(|f| {
                f.sources
                    .iter()
                    .map(|s| self.prepare(scope, f.kind, s))
                    .collect::<Result<Vec<_>>>()
            })
            .collect::<Result<_>>()?;
        let report = {
            let _w = self.write.lock().expect("write lock poisoned");
            // Other processes sharing the store write this scope's record too.
            let _s = self.store.lock_scope(scope)?;
            self.ingest_locked(scope, files, prepared, now)?
        };
        crate::fail::point("ingest:before-flush");
        self.store.flush()?;
        crate::fail::point("ingest:before-index");
        self.sync_index_or_warn();
        Ok(report)
    }

    /// Chunks a source before the write lock is taken (the CPU-heavy part of an ingest), or
    /// `None` when the store already holds it unchanged (checked again under the lock).
    fn prepare(&self, scope: &str, kind: ScopeKind, s: &SourceInput) -> Result<Option<Vec<Chunk>>> {
        let budget = self.cfg.chunk.tokens;
        if let Some(old) = self.store.get_source(scope, &s.id)?
            && unchanged(&old, s, budget)
        {
            return Ok(None);
        }
        Ok(Some(chunk::chunk(&s.text, structure_of(kind), budget)))
    }

    fn ingest_locked(
        &self,
        scope: &str,
        files: &[InputFile],
        prepared: Vec<Vec<Option<Vec<Chunk>>>>,
        now: u64,
    ) -> Result<IngestReport> {
        let kind = files.first().map(|f| f.kind).unwrap_or(ScopeKind::Doc);
        // The scope's head, not its list: a turn reads and writes its own entry only.
        let mut head = match self.store.get_scope_head(scope)? {
            Some(r) if r.kind != kind => {
                return Err(Error::invalid(format!(
                    "scope `{scope}` holds {}s; this input is a {}",
                    kind_name(r.kind),
                    kind_name(kind)
                )));
            }
            Some(r) => r,
            None => ScopeHead {
                name: scope.to_string(),
                kind,
                next_seq: 0,
                created_at: now,
                updated_at: now,
            },
        };
        let mut report = IngestReport {
            scope: scope.to_string(),
            kind: Some(kind),
            files: files.len(),
            ..Default::default()
        };
        for (f, chunks) in files.iter().zip(prepared) {
            report.bytes += f.bytes;
            let mut step = SourceStep {
                scope: head.clone(),
                list: Vec::new(),
                put: Vec::new(),
                remove_sources: Vec::new(),
                remove_nodes: Vec::new(),
            };
            // A re-ingested debate file may have lost turns; single turns appended
            // without a file (`path` empty) never remove anything.
            if kind == ScopeKind::Debate && !f.path.as_os_str().is_empty() {
                let prefix = format!("{}#", f.path.display());
                let keep: HashSet<&str> = f.sources.iter().map(|s| s.id.as_str()).collect();
                let listed = self.store.get_scope(scope)?.map(|r| r.sources);
                let gone: Vec<String> = listed
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|e| e.id.starts_with(&prefix) && !keep.contains(e.id.as_str()))
                    .map(|e| e.id)
                    .collect();
                for id in gone {
                    if let Some(old) = self.store.get_source(scope, &id)? {
                        step.remove_nodes.extend(old.chunks.iter().map(|c| c.id));
                    }
                    step.remove_sources.push(id);
                    report.removed += 1;
                }
            }
            for (s, chunks) in f.sources.iter().zip(chunks) {
                match self.stage_source(&mut head, &mut step, s, chunks, now)? {
                    Outcome::Added => report.added += 1,
                    Outcome::Replaced => report.replaced += 1,
                    Outcome::Unchanged => report.unchanged += 1,
                }
            }
            if step.put.is_empty() && step.remove_sources.is_empty() {
                continue;
            }
            report.chunks_written += step.put.iter().map(|p| p.nodes.len()).sum::<usize>();
            head.updated_at = now;
            step.scope = head.clone();
            self.store.write_sources(&step)?;
            crate::fail::point("ingest:file-written");
        }
        Ok(report)
    }

    /// Appends (or replaces) one debate turn under `source_id`.
    pub fn append_turn(
        &self,
        scope: &str,
        source_id: String,
        turn: source::Turn,
        now: u64,
    ) -> Result<IngestReport> {
        let input = source::turn_input(source_id, turn)?;
        let file = InputFile::single(ScopeKind::Debate, "", input);
        self.ingest(scope, &[file], now)
    }

    /// Adds one source to `step` (and counts it in the scope's head `rec`), or finds it
    /// unchanged. `chunks` were cut before the lock; `None` means the source looked
    /// unchanged then.
    fn stage_source(
        &self,
        rec: &mut ScopeHead,
        step: &mut SourceStep,
        s: &SourceInput,
        chunks: Option<Vec<Chunk>>,
        now: u64,
    ) -> Result<Outcome> {
        let budget = self.cfg.chunk.tokens;
        let old = self.store.get_source(&rec.name, &s.id)?;
        // Listed by this step already (an id given twice), or by the store.
        let listed = match step.list.iter().find(|e| e.id == s.id) {
            Some(e) => Some(e.seq),
            None => self.store.get_entry(&rec.name, &s.id)?.map(|e| e.seq),
        };
        if let Some(o) = &old
            && listed.is_some()
            && unchanged(o, s, budget)
        {
            return Ok(Outcome::Unchanged);
        }
        // Changed since it was prepared (or never prepared): chunk it now.
        let chunks = match chunks {
            Some(c) => c,
            None => chunk::chunk(&s.text, structure_of(rec.kind), budget),
        };
        let hash = *blake3::hash(s.text.as_bytes()).as_bytes();
        let nodes = full_nodes(&rec.name, s, &chunks, now);
        // A source the scope lists keeps its place; anything else gets the next number
        // (a record the scope does not list is a leftover, never a place).
        let seq = match listed {
            Some(seq) => seq,
            None => {
                rec.next_seq += 1;
                rec.next_seq - 1
            }
        };
        let record = SourceRecord {
            id: s.id.clone(),
            scope: rec.name.clone(),
            seq,
            round: s.round,
            speaker: s.speaker.clone(),
            hash,
            bytes: s.text.len() as u64,
            chunk_tokens: budget as u32,
            chunks: chunks
                .iter()
                .zip(&nodes)
                .map(|(c, n)| ChunkRef {
                    id: n.id,
                    start: c.start as u64,
                    end: c.end as u64,
                    tokens: c.tokens as u32,
                    section: c.section,
                    headings: c.headings.clone(),
                })
                .collect(),
            time: s.time,
        };
        if let Some(o) = &old {
            let new_ids: HashSet<NodeId> = nodes.iter().map(|n| n.id).collect();
            step.remove_nodes.extend(
                o.chunks
                    .iter()
                    .map(|c| c.id)
                    .filter(|id| !new_ids.contains(id)),
            );
        }
        step.list.retain(|e| e.id != s.id);
        step.list.push(SourceEntry {
            id: s.id.clone(),
            round: s.round,
            seq,
        });
        step.put.push(SourcePut {
            record,
            text: s.text.clone(),
            nodes,
        });
        Ok(if listed.is_some() {
            Outcome::Replaced
        } else {
            Outcome::Added
        })
    }

    /// Appends one debate turn under a fresh source id (`scope#turn-N`), creating the debate
    /// if needed. Safe to call concurrently: appends are serialised and none is lost. The
    /// turn is durable on return; it becomes searchable with the next build or query.
    ///
    /// N comes from the scope's head, which is written in the same transaction as the turn,
    /// so a crash can never hand out a number twice; an id the store already holds (a
    /// leftover of an older strata) is skipped, never replaced. An append reads and writes
    /// the head and the turn's own entry, whatever the debate's length.
    pub fn append(
        &self,
        scope: &str,
        turn: source::Turn,
        now: u64,
    ) -> Result<(IngestReport, String)> {
        crate::id::scope(scope)?;
        // Validate and chunk before the lock; the id only names the source.
        let probe = source::turn_input(format!("{scope}#turn"), turn)?;
        check_source(&probe)?;
        source::check_size(
            &probe.id,
            probe.text.len() as u64,
            self.cfg.ingest.max_source_bytes(),
        )?;
        self.ensure_room(probe.text.len() as u64)?;
        self.writing()?;
        let chunks = chunk::chunk(&probe.text, Structure::Turn, self.cfg.chunk.tokens);
        let (report, id) = {
            let _w = self.write.lock().expect("write lock poisoned");
            let _s = self.store.lock_scope(scope)?;
            let head = self.store.get_scope_head(scope)?;
            let mut n = head.as_ref().map_or(0, |r| r.next_seq) + 1;
            let id = loop {
                let id = format!("{scope}#turn-{n}");
                let listed = head.is_some() && self.store.get_entry(scope, &id)?.is_some();
                if !listed && self.store.get_source(scope, &id)?.is_none() {
                    break id;
                }
                n += 1;
            };
            let input = SourceInput {
                id: id.clone(),
                ..probe
            };
            let file = InputFile::single(ScopeKind::Debate, "", input);
            (
                self.ingest_locked(scope, &[file], vec![vec![Some(chunks)]], now)?,
                id,
            )
        };
        crate::fail::point("append:before-flush");
        self.store.flush()?;
        crate::fail::point("append:flushed");
        Ok((report, id))
    }
}

enum Outcome {
    Added,
    Replaced,
    Unchanged,
}

fn kind_name(k: ScopeKind) -> &'static str {
    match k {
        ScopeKind::Doc => "document",
        ScopeKind::Debate => "debate",
    }
}

/// How a source of a scope of `kind` is cut.
fn structure_of(kind: ScopeKind) -> Structure {
    match kind {
        ScopeKind::Doc => Structure::Document,
        ScopeKind::Debate => Structure::Turn,
    }
}

/// Whether the stored record `old` already holds `s` as it would be ingested now.
fn unchanged(old: &SourceRecord, s: &SourceInput, budget: usize) -> bool {
    old.hash == *blake3::hash(s.text.as_bytes()).as_bytes()
        && old.round == s.round
        && old.speaker == s.speaker
        && old.time == s.time
        && old.chunk_tokens as usize == budget
}

/// The names a source brings into the store, checked by the one set of rules (`id`).
fn check_source(s: &SourceInput) -> Result<()> {
    crate::id::source(&s.id)?;
    if let Some(sp) = &s.speaker {
        crate::id::speaker(sp).map_err(|e| Error::invalid(format!("{}: {e}", s.id)))?;
    }
    Ok(())
}

/// The FULL nodes of a source cut into `chunks`.
fn full_nodes(scope: &str, s: &SourceInput, chunks: &[Chunk], now: u64) -> Vec<Node> {
    let meta = Meta {
        rounds: s.round.into_iter().collect(),
        speakers: s.speaker.iter().cloned().collect(),
        headings: Vec::new(),
        tags: None,
        time: s.time.map(TimeSpan::of),
    };
    chunks
        .iter()
        .map(|c| {
            let text = s.text[c.start..c.end].to_string();
            Node {
                id: full_id_at(scope, &s.id, c.start, c.end, &text, s.time.as_ref()),
                scope: scope.to_string(),
                level: Level::Full,
                tokens: c.tokens as u32,
                text,
                children: Vec::new(),
                citations: vec![Span {
                    source: s.id.clone(),
                    start: c.start as u64,
                    end: c.end as u64,
                }],
                meta: Meta {
                    headings: c.headings.clone(),
                    ..meta.clone()
                },
                created_at: now,
                expires_at: None,
            }
        })
        .collect()
}
