use super::*;
use crate::node::{Meta, Span, full_id};

fn node(scope: &str, level: Level, source: &str, text: &str) -> Node {
    Node {
        id: full_id(scope, source, 0, text.len(), text),
        scope: scope.to_string(),
        level,
        text: text.to_string(),
        children: Vec::new(),
        citations: vec![Span {
            source: source.to_string(),
            start: 0,
            end: text.len() as u64,
        }],
        tokens: 10,
        meta: Meta::default(),
        created_at: 0,
        expires_at: None,
    }
}

fn index(nodes: &[Node]) -> Index {
    let ix = Index::in_memory().unwrap();
    ix.upsert(nodes).unwrap();
    ix.commit().unwrap();
    ix
}

fn search(ix: &Index, q: &str, scopes: &[String], levels: &[Level]) -> Vec<NodeId> {
    let query = ix.analyse_query(q);
    ix.search(&Grep {
        query: &query,
        scopes,
        levels,
        within: None,
        limit: 10,
    })
    .unwrap()
    .into_iter()
    .map(|h| h.id)
    .collect()
}

#[test]
fn questions_are_analysed_once_stop_words_dropped_terms_stemmed_names_marked() {
    let ix = Index::in_memory().unwrap();
    let a = ix.analyse_query("What did Okafor propose about the fares?");
    assert!(
        !a.terms
            .iter()
            .any(|t| t == "the" || t == "what" || t == "did")
    );
    assert!(a.terms.iter().any(|t| t == "fare"), "{:?}", a.terms);
    assert!(a.names.contains("okafor"), "{:?}", a.names);
    // The first word is capitalised by grammar, not because it names something.
    assert!(!a.names.contains("what"));
    assert!(
        ix.search(&Grep {
            query: &ix.analyse_query("the of and"),
            scopes: &[],
            levels: &[],
            within: None,
            limit: 10,
        })
        .unwrap()
        .is_empty()
    );
}

#[test]
fn a_node_holding_every_rare_term_beats_a_short_one_repeating_some() {
    let all = node(
        "s",
        Level::Full,
        "a.md",
        "The harbour tunnel budget was set at 40 million after the audit of the ferry contracts.",
    );
    let some = node("s", Level::Full, "b.md", "Tunnel. Tunnel tunnel.");
    let other = node(
        "s",
        Level::Full,
        "c.md",
        "Nothing to do with the question at all.",
    );
    let ix = index(&[some.clone(), all.clone(), other]);
    let hits = search(&ix, "tunnel budget audit ferry", &[], &[]);
    assert_eq!(hits.first(), Some(&all.id), "{hits:?}");
    assert!(hits.contains(&some.id));
    assert_eq!(hits.len(), 2);
}

#[test]
fn searches_keep_to_their_scopes_and_levels_and_deletes_take_effect() {
    let a = node("one", Level::Full, "a.md", "the river crossing plan");
    let b = node("two", Level::Full, "a.md", "the river crossing plan, again");
    let c = node(
        "one",
        Level::Summary,
        "s",
        "a summary of the river crossing",
    );
    let ix = index(&[a.clone(), b.clone(), c.clone()]);
    let one = vec!["one".to_string()];
    let mut got = search(&ix, "river crossing", &one, &[]);
    got.sort();
    let mut want = vec![a.id, c.id];
    want.sort();
    assert_eq!(got, want);
    assert_eq!(
        search(&ix, "river crossing", &one, &[Level::Summary]),
        [c.id]
    );
    ix.delete(&[a.id]).unwrap();
    ix.commit().unwrap();
    assert_eq!(search(&ix, "river crossing", &one, &[Level::Full]), []);
    assert_eq!(ix.n_docs(), 2);
}

#[test]
fn a_full_chunks_sentences_are_analysed_once_and_bounded() {
    let ix = Index::in_memory().unwrap();
    let text = "  The bridge costs $61 million.  Who pays for it?\n\nThe council pays. ";
    let n = node("s", Level::Full, "a", text);
    let first = ix.sentences_of(&n);
    // Blank sentences and questions are left out; spans are the chunk's.
    let quotes: Vec<&str> = first
        .iter()
        .map(|s| &text[s.trimmed.0..s.trimmed.1])
        .collect();
    assert_eq!(
        quotes,
        ["The bridge costs $61 million.", "The council pays."]
    );
    assert_eq!(
        first[0].terms,
        ix.analyze_all(&text[first[0].trimmed.0..first[0].trimmed.1])
    );
    // The second read is the cached one; another level is analysed each time.
    assert!(Arc::ptr_eq(&first, &ix.sentences_of(&n)));
    let d = node("s", Level::Detailed, "a", text);
    assert!(!Arc::ptr_eq(&ix.sentences_of(&d), &ix.sentences_of(&d)));
    // The cache stays within its bound however many chunks pass through it.
    let long = "A sentence with several distinct words in it. ".repeat(2000);
    for i in 0..200 {
        ix.sentences_of(&node("s", Level::Full, &format!("src{i}"), &long));
    }
    let cache = ix.sentences.lock().unwrap();
    assert!(cache.bytes <= SENTENCE_CACHE_BYTES, "{}", cache.bytes);
    assert!(cache.entries.len() < 200);
}

#[test]
fn adjacent_pairs_are_content_words_side_by_side_with_no_stop_word_or_comma_between() {
    let ix = Index::in_memory().unwrap();
    let pairs = |t: &str| -> Vec<(String, String)> { ix.adjacent_pairs(t).into_iter().collect() };
    let p = |a: &str, b: &str| (a.to_string(), b.to_string());
    assert_eq!(
        pairs("Who opposed the stadium roof?"),
        vec![p("stadium", "roof")]
    );
    // A hyphen joins; a comma or a stop word does not.
    assert_eq!(
        pairs("the new start-time schedule"),
        vec![p("new", "start"), p("start", "time"), p("time", "schedul")]
    );
    assert_eq!(
        pairs("arts, culture and tourism industry"),
        vec![p("tourism", "industri")]
    );
}
