//! `load_corpus`: a scope's nodes, filtered, kept as a segment, served a page at a time.

use super::session::{Item, Segment, Session};
use super::{LevelName, ToolError, provenance_time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use strata_core::level::Level;
use strata_engine::engine::Engine;
use strata_engine::node::{Node, NodeId};
use strata_engine::plan::Plan;

/// Most nodes one segment holds (narrower filters for more).
pub(crate) const MAX_ITEMS: usize = 20_000;
/// Default and largest page.
const PAGE_SIZE: usize = 20;
const MAX_PAGE_SIZE: usize = 100;

/// Arguments of `load_corpus`. Either `scope` with filters (a new segment), or `segment`
/// (another page of one made before).
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LoadCorpus {
    /// The scope to read (a debate id or a document collection).
    pub(crate) scope: Option<String>,
    /// A segment id from an earlier call: page through it instead of filtering anew.
    pub(crate) segment: Option<String>,
    /// Keep nodes beneath one of these sources (source ids: a document's path, a debate
    /// turn's `file#line`).
    #[serde(default)]
    pub(crate) sources: Vec<String>,
    /// Keep nodes with a debate round in this range (inclusive).
    pub(crate) rounds: Option<RoundRange>,
    /// Keep nodes where one of these speakers speaks (case-insensitive).
    #[serde(default)]
    pub(crate) speakers: Vec<String>,
    /// Levels to list (default: full, the source text).
    #[serde(default)]
    pub(crate) levels: Vec<LevelName>,
    /// Keep nodes stored at or after this time: unix seconds, `YYYY-MM-DD` or RFC 3339.
    pub(crate) date_from: Option<When>,
    /// Keep nodes stored at or before this time (a bare date includes the whole day).
    pub(crate) date_to: Option<When>,
    /// Keep nodes of what was said at or after this time: the turns' and documents' own
    /// `time` (RFC 3339 or `YYYY-MM-DD`), not when they were stored. Nodes of sources
    /// without a time are then left out.
    pub(crate) since: Option<String>,
    /// Keep nodes of what was said at or before this time (a bare date includes the
    /// whole day).
    pub(crate) until: Option<String>,
    /// Keep nodes whose text contains this term (case-insensitive).
    pub(crate) search: Option<String>,
    /// The page, from 1.
    pub(crate) page: Option<usize>,
    /// Items per page (default 20, at most 100). Paging a segment, the default is the
    /// page size it was made with.
    pub(crate) page_size: Option<usize>,
}

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RoundRange {
    pub(crate) from: Option<u32>,
    pub(crate) to: Option<u32>,
}

/// A point in time: unix seconds, or a date (`2026-11-24`) or RFC 3339 time.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub(crate) enum When {
    Unix(u64),
    Text(String),
}

impl When {
    /// Unix seconds; `end` makes a bare date mean the last second of its day.
    fn seconds(&self, end: bool) -> Result<u64, ToolError> {
        let text = match self {
            When::Unix(s) => return Ok(*s),
            When::Text(t) => t.trim(),
        };
        if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
            return u64::try_from(t.timestamp())
                .map_err(|_| ToolError::Invalid(format!("`{text}` is before 1970")));
        }
        let day = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d").map_err(|_| {
            ToolError::Invalid(format!(
                "`{}` is not a time: give unix seconds, YYYY-MM-DD or an RFC 3339 time",
                text.escape_debug()
            ))
        })?;
        let t = if end {
            day.and_hms_opt(23, 59, 59)
        } else {
            day.and_hms_opt(0, 0, 0)
        }
        .expect("a valid time of day")
        .and_utc()
        .timestamp();
        u64::try_from(t).map_err(|_| ToolError::Invalid(format!("`{text}` is before 1970")))
    }
}

/// The filters of a new segment, checked.
struct Filters {
    sources: Vec<String>,
    rounds: Option<(u32, u32)>,
    speakers: Vec<String>,
    levels: Vec<Level>,
    from: Option<u64>,
    to: Option<u64>,
    /// When what the nodes cover was said (`since`, `until`).
    during: strata_engine::time::TimeRange,
    search: Option<String>,
}

impl Filters {
    fn check(a: &LoadCorpus) -> Result<Filters, ToolError> {
        let rounds = a
            .rounds
            .as_ref()
            .map(|r| (r.from.unwrap_or(0), r.to.unwrap_or(u32::MAX)));
        if let Some((f, t)) = rounds
            && f > t
        {
            return Err(ToolError::Invalid(format!(
                "rounds.from ({f}) is after rounds.to ({t})"
            )));
        }
        let from = a.date_from.as_ref().map(|w| w.seconds(false)).transpose()?;
        let to = a.date_to.as_ref().map(|w| w.seconds(true)).transpose()?;
        if let (Some(f), Some(t)) = (from, to)
            && f > t
        {
            return Err(ToolError::Invalid("date_from is after date_to".into()));
        }
        let during = strata_engine::time::TimeRange::parse(a.since.as_deref(), a.until.as_deref())
            .map_err(|e| ToolError::Invalid(e.to_string()))?;
        let search = match a.search.as_deref().map(str::trim) {
            Some("") => return Err(ToolError::Invalid("search is empty".into())),
            s => s.map(str::to_lowercase),
        };
        let mut levels: Vec<Level> = a.levels.iter().map(|l| l.level()).collect();
        if levels.is_empty() {
            levels.push(Level::Full);
        }
        levels.sort();
        levels.dedup();
        Ok(Filters {
            sources: a.sources.clone(),
            rounds,
            speakers: a.speakers.iter().map(|s| s.to_lowercase()).collect(),
            levels,
            from,
            to,
            during,
            search,
        })
    }

    fn keeps(&self, n: &Node) -> bool {
        (self.sources.is_empty() || n.citations.iter().any(|s| self.sources.contains(&s.source)))
            && self
                .rounds
                .is_none_or(|(f, t)| n.meta.rounds.iter().any(|r| (f..=t).contains(r)))
            && (self.speakers.is_empty()
                || n.meta
                    .speakers
                    .iter()
                    .any(|s| self.speakers.contains(&s.to_lowercase())))
            && self.from.is_none_or(|f| n.created_at >= f)
            && self.to.is_none_or(|t| n.created_at <= t)
            && self.during.overlaps(n.meta.time.as_ref())
            && self
                .search
                .as_ref()
                .is_none_or(|q| n.text.to_lowercase().contains(q.as_str()))
    }

    /// As echoed in the provenance.
    fn applied(&self, rounds: &Option<RoundRange>) -> Value {
        json!({
            "sources": self.sources,
            "rounds": rounds,
            "speakers": self.speakers,
            "levels": self.levels,
            "date_from": self.from,
            "date_to": self.to,
            "since": self.during.since.map(|t| t.to_string()),
            "until": self.during.until.map(|t| t.to_string()),
            "search": self.search,
        })
    }
}

/// Runs `load_corpus`.
pub(crate) async fn load_corpus(
    engine: &Engine,
    session: &Session,
    a: LoadCorpus,
    now: u64,
) -> Result<Value, ToolError> {
    let page = a.page.unwrap_or(1);
    if page == 0 {
        return Err(ToolError::Invalid("page starts at 1".into()));
    }
    if a.page_size.is_some_and(|n| n == 0 || n > MAX_PAGE_SIZE) {
        return Err(ToolError::Invalid(format!(
            "page_size must be 1 to {MAX_PAGE_SIZE}"
        )));
    }
    let segment = match (&a.segment, &a.scope) {
        (Some(id), None) => {
            let filtered = !a.sources.is_empty()
                || a.rounds.is_some()
                || !a.speakers.is_empty()
                || !a.levels.is_empty()
                || a.date_from.is_some()
                || a.date_to.is_some()
                || a.since.is_some()
                || a.until.is_some()
                || a.search.is_some();
            if filtered {
                return Err(ToolError::Invalid(
                    "a segment keeps the filters it was made with: give `segment` and a page, or `scope` and filters".into(),
                ));
            }
            session.segment(id)?
        }
        (None, Some(scope)) => {
            let filters = Filters::check(&a)?;
            let plan = if filters.levels.iter().any(|&l| l != Level::Full) {
                // Derived levels are read from a complete build: made now if missing or
                // expired.
                engine
                    .ensure_built(scope, now, &strata_core::progress::NoProgress)
                    .await?
                    .0
            } else {
                engine.plan(scope)?
            };
            let items = super::blocking(|| select(engine, &plan, &filters, now))?;
            let applied = filters.applied(&a.rounds);
            session.add_segment(|id| Segment {
                id,
                scope: scope.clone(),
                filters: applied,
                created_at: now,
                page_size: a.page_size.unwrap_or(PAGE_SIZE),
                items,
            })
        }
        _ => {
            return Err(ToolError::Invalid(
                "give either `scope` (a new segment) or `segment` (a page of an earlier one)"
                    .into(),
            ));
        }
    };
    let page_size = a.page_size.unwrap_or(segment.page_size);
    let total = segment.items.len();
    let start = (page - 1).saturating_mul(page_size).min(total);
    let end = (start + page_size).min(total);
    Ok(json!({
        "segment": segment.id,
        "scope": segment.scope,
        "total": total,
        "page": page,
        "page_size": page_size,
        "pages": total.div_ceil(page_size),
        "items": segment.items[start..end]
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let mut v = serde_json::to_value(item).expect("an item serializes");
                v["index"] = json!(start + i);
                v
            })
            .collect::<Vec<_>>(),
        "provenance": {
            "scope": segment.scope,
            "filters": segment.filters,
            "segment_created_at": segment.created_at,
            "timestamp": provenance_time(now),
            "compressor": engine.model_identity(),
        },
    }))
}

/// The scope's nodes at the filters' levels, in reading order per level, that pass them.
fn select(
    engine: &Engine,
    plan: &Plan,
    filters: &Filters,
    now: u64,
) -> Result<Vec<Item>, ToolError> {
    let mut items = Vec::new();
    for &level in &filters.levels {
        let ids = plan.ids_at(level);
        for batch in ids.chunks(1024) {
            for (id, node) in batch.iter().zip(engine.live_nodes(batch, now)?) {
                let node = node.ok_or_else(|| missing(id, level))?;
                if !filters.keeps(&node) {
                    continue;
                }
                if items.len() == MAX_ITEMS {
                    return Err(ToolError::Invalid(format!(
                        "more than {MAX_ITEMS} nodes of `{}` pass these filters: narrow them (sources, rounds, speakers, levels, dates, search)",
                        plan.scope
                    )));
                }
                items.push(item(node));
            }
        }
    }
    Ok(items)
}

fn missing(id: &NodeId, level: Level) -> ToolError {
    ToolError::Failed(format!(
        "the {level} node {} of the current tree is not in the store (run `strata compress`)",
        id.to_hex()
    ))
}

pub(crate) fn item(n: Node) -> Item {
    let mut sources: Vec<String> = Vec::new();
    for s in &n.citations {
        if !sources.contains(&s.source) {
            sources.push(s.source.clone());
        }
    }
    let one = |v: &[u32]| (v.len() == 1).then(|| v[0]);
    Item {
        id: n.id.to_hex(),
        level: n.level,
        source: sources.first().cloned(),
        round: one(&n.meta.rounds),
        speaker: (n.meta.speakers.len() == 1).then(|| n.meta.speakers[0].clone()),
        sources,
        rounds: n.meta.rounds,
        speakers: n.meta.speakers,
        headings: n.meta.headings,
        tokens: n.tokens,
        created_at: n.created_at,
        text: n.text,
        spans: n.citations,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `since`/`until` keep the nodes of what was said in the range (the sources' own
    /// times), not of when it was stored; untimed sources are then left out.
    #[tokio::test]
    async fn since_and_until_filter_by_when_it_was_said() {
        let e = Engine::in_memory(strata_engine::Config::default()).unwrap();
        let jsonl = [
            r#"{"round":1,"speaker":"a","text":"May turn.","time":"2023-05-08T13:56:00Z"}"#,
            r#"{"round":2,"speaker":"b","text":"June turn.","time":"2023-06-09"}"#,
            r#"{"round":3,"speaker":"a","text":"Untimed turn."}"#,
        ]
        .join("\n");
        let sources = strata_engine::source::debate("d.jsonl", &jsonl).unwrap();
        let file = strata_engine::source::InputFile {
            path: "d.jsonl".into(),
            kind: strata_engine::store::ScopeKind::Debate,
            bytes: jsonl.len() as u64,
            sources,
        };
        e.ingest("d", &[file], 1).unwrap();
        let session = Session::default();
        let texts = |v: Value| -> Vec<String> {
            v["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["text"].as_str().unwrap().to_string())
                .collect()
        };
        let load = |since: Option<&str>, until: Option<&str>| LoadCorpus {
            scope: Some("d".into()),
            since: since.map(String::from),
            until: until.map(String::from),
            ..Default::default()
        };
        let all = load_corpus(&e, &session, load(None, None), 2)
            .await
            .unwrap();
        assert_eq!(all["total"], 3);
        let june = load_corpus(&e, &session, load(Some("2023-06-01"), None), 2)
            .await
            .unwrap();
        assert_eq!(texts(june.clone()), ["June turn."]);
        assert_eq!(june["provenance"]["filters"]["since"], "2023-06-01");
        let may = load_corpus(&e, &session, load(None, Some("2023-05-08")), 2)
            .await
            .unwrap();
        assert_eq!(texts(may), ["May turn."]);
        let Err(ToolError::Invalid(m)) =
            load_corpus(&e, &session, load(Some("soon"), None), 2).await
        else {
            panic!("a bad time is an invalid argument")
        };
        assert!(m.starts_with("since: invalid time `soon`"), "{m}");
    }

    #[test]
    fn times_are_unix_seconds_dates_or_rfc3339() {
        let w = |s: &str| When::Text(s.into());
        assert_eq!(When::Unix(5).seconds(false).unwrap(), 5);
        assert_eq!(w("1970-01-02").seconds(false).unwrap(), 86_400);
        assert_eq!(w("1970-01-02").seconds(true).unwrap(), 2 * 86_400 - 1);
        assert_eq!(w("1970-01-01T00:01:00Z").seconds(false).unwrap(), 60);
        let ToolError::Invalid(e) = w("yesterday").seconds(false).unwrap_err() else {
            panic!("a bad time is an invalid argument")
        };
        assert_eq!(
            e,
            "`yesterday` is not a time: give unix seconds, YYYY-MM-DD or an RFC 3339 time"
        );
    }
}
