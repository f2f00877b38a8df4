use super::*;
use crate::node::Meta;

fn node(k: u8, text: &str) -> Node {
    Node {
        id: NodeId([k; 32]),
        scope: "s".into(),
        level: Level::Full,
        text: text.into(),
        children: Vec::new(),
        citations: Vec::new(),
        tokens: 1,
        meta: Meta::default(),
        created_at: 0,
        expires_at: None,
    }
}

fn search(i: &Index, q: &str) -> Vec<(NodeId, u32)> {
    scoped_search(i, q, &[])
}

/// The top 3 hits of `q` in `scopes` (empty: every scope), scores to a thousandth.
fn scoped_search(i: &Index, q: &str, scopes: &[String]) -> Vec<(NodeId, u32)> {
    let a = i.analyse_query(q);
    i.search(&Grep {
        query: &a,
        scopes,
        levels: &[],
        within: None,
        limit: 3,
    })
    .unwrap()
    .into_iter()
    .map(|h| (h.id, (h.score * 1000.0).round() as u32))
    .collect()
}

// Regression: deleted documents stayed in tantivy's statistics, so a replica that
// followed every change ranked a question differently from one rebuilt from the store.
#[test]
fn ranking_depends_on_the_live_documents_only() {
    let nodes = [
        node(1, "The ferry needs twelve berths at the harbour."),
        node(2, "The harbour ferry runs every hour; ferry fares rise."),
        node(3, "Berths cost money."),
        node(4, "The ferry, the ferry, the ferry."),
        node(5, "Nothing about boats here."),
        node(6, "Nothing about boats here."),
    ];
    let fresh = Index::in_memory().unwrap();
    fresh.upsert(&nodes).unwrap();
    fresh.commit().unwrap();
    let churned = Index::in_memory().unwrap();
    churned.upsert(&nodes).unwrap();
    churned.commit().unwrap();
    for _ in 0..3 {
        churned.upsert(&nodes[..4]).unwrap();
        churned.delete(&[NodeId([9; 32])]).unwrap();
        churned.commit().unwrap();
    }
    churned
        .upsert(&[node(7, "A ferry that is gone again.")])
        .unwrap();
    churned.commit().unwrap();
    churned.delete(&[NodeId([7; 32])]).unwrap();
    churned.commit().unwrap();
    assert_eq!(fresh.n_docs(), churned.n_docs());
    for q in ["ferry berths", "harbour ferry fares", "boats"] {
        assert_eq!(search(&fresh, q), search(&churned, q), "{q}");
        assert_eq!(fresh.idf("ferri", &[]), churned.idf("ferri", &[]));
    }
    // With nothing deleted, the live statistics are tantivy's own.
    let s = fresh.reader.searcher();
    let live = LiveStats::new(&fresh, &s, &[]);
    assert_eq!(
        live.total_num_tokens(fresh.f.text).unwrap(),
        Bm25StatisticsProvider::total_num_tokens(&s, fresh.f.text).unwrap()
    );
    // Equal scores come in node-id order.
    let tied = search(&fresh, "boats");
    assert_eq!(tied[0].0, NodeId([5; 32]));
}

// A scope's ranking reads its own documents' statistics: an index that also holds another
// scope (which repeats the question's words, some of its documents deleted since) scores a
// search of the scope exactly as an index holding the scope alone.
#[test]
fn a_scopes_ranking_depends_on_its_own_documents_only() {
    let mine = [
        node(1, "The ferry needs twelve berths at the harbour."),
        node(2, "The harbour ferry runs every hour; ferry fares rise."),
        node(3, "Berths cost money."),
        node(4, "Nothing about boats here."),
    ];
    let theirs: Vec<Node> = (10..40u8)
        .map(|k| Node {
            scope: "t".into(),
            ..node(
                k,
                "Ferry fares and ferry berths, again and again at length.",
            )
        })
        .collect();
    let alone = Index::in_memory().unwrap();
    alone.upsert(&mine).unwrap();
    alone.commit().unwrap();
    let shared = Index::in_memory().unwrap();
    shared.upsert(&theirs).unwrap();
    shared.upsert(&mine).unwrap();
    shared.commit().unwrap();
    shared.delete(&[theirs[0].id, theirs[1].id]).unwrap();
    shared.commit().unwrap();
    let s = ["s".to_string()];
    for q in ["ferry berths", "harbour ferry fares", "berths money"] {
        assert_eq!(
            scoped_search(&alone, q, &s),
            scoped_search(&shared, q, &s),
            "{q}"
        );
        assert_eq!(alone.idf("ferri", &s), shared.idf("ferri", &s));
    }
    // The whole store's statistics are another reading: the other scope's documents count.
    assert_ne!(alone.idf("ferri", &[]), shared.idf("ferri", &[]));
}
