//! Kinds of things, from a public lexicon: for an English noun, the single words naming
//! its kinds and instances ("sport" → archery, skiing, volleyball …; "city" → Miami …),
//! read from WordNet 3.0's noun hyponym graph (Princeton University, the WordNet licence:
//! `data/lexicon/WORDNET-LICENSE`) by `scripts/lexicon/build_kinds.py` into
//! `data/lexicon/kinds-wn30.tsv`. A question asking for a set of things of a kind ("What
//! sports does Kevin like?") is answered by passages naming its members, which rarely
//! repeat the kind's own word. No entry was written or chosen here: the file is the
//! lexicon's graph, cut only by the builder's two rules (a noun's two most frequent
//! senses; kinds with more than 2,000 member words left out). Part of the navigator's
//! identity: [`VERSION`] names it.

use std::collections::HashMap;
use std::sync::OnceLock;

/// The version of the kinds table below.
pub const VERSION: &str = "kinds-wn30-1";

static TABLE: &str = include_str!("../../../../data/lexicon/kinds-wn30.tsv");

fn table() -> &'static HashMap<&'static str, &'static str> {
    static MAP: OnceLock<HashMap<&'static str, &'static str>> = OnceLock::new();
    MAP.get_or_init(|| TABLE.lines().filter_map(|l| l.split_once('\t')).collect())
}

/// The member words of the noun `noun` (lower case, singular), or None when the lexicon
/// has no kinds of it.
pub fn members(noun: &str) -> Option<impl Iterator<Item = &'static str>> {
    table().get(noun).map(|m| m.split(' '))
}

/// The noun `word` (lower case) is, or is the plural of, as the lexicon knows it: "food"
/// → food, "cities" → city, "sports" → sport, "dishes" → dish; None when the lexicon has
/// no kinds of it.
pub fn noun(word: &str) -> Option<&'static str> {
    let t = table();
    let mut forms = vec![word.to_string()];
    if let Some(s) = word.strip_suffix('s') {
        forms.push(s.to_string());
    }
    if let Some(s) = word.strip_suffix("es") {
        forms.push(s.to_string());
    }
    if let Some(s) = word.strip_suffix("ies") {
        forms.push(format!("{s}y"));
    }
    forms
        .iter()
        .find_map(|f| t.get_key_value(f.as_str()).map(|(k, _)| *k))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table is the builder's output, unchanged (`scripts/lexicon/build_kinds.py`
    /// writes a file whose sha256 is
    /// 69255bfe7b40453008183bd8ddb24726b1ef314d4ab906e2a5ced4fad2cd6b0e): a hand edit, or
    /// a rebuild from other data, changes this hash and must change [`VERSION`] with it.
    #[test]
    fn the_table_is_the_lexicons() {
        assert_eq!(
            blake3::hash(TABLE.as_bytes()).to_hex().as_str(),
            "8c29fa18a415403b95fe36dc59d87f8710be49fcea0bde625dc5ad8302a0ce0c"
        );
        assert_eq!(VERSION, "kinds-wn30-1");
        assert_eq!(table().len(), 13_497);
    }

    #[test]
    fn a_kind_names_its_members() {
        let sports: Vec<&str> = members("sport").expect("sport").collect();
        for m in ["skiing", "volleyball", "basketball", "tennis"] {
            assert!(sports.contains(&m), "{m} in {sports:?}");
        }
        let cities: Vec<&str> = members("city").expect("city").collect();
        assert!(cities.contains(&"miami"));
        assert!(members("xyzzy").is_none());
        assert_eq!(noun("cities"), Some("city"));
        assert_eq!(noun("sports"), Some("sport"));
        assert_eq!(noun("dishes"), Some("dish"));
        assert_eq!(noun("countries"), Some("country"));
        // Too general a kind (more than 2,000 member words) is left out.
        assert_eq!(noun("activities"), None);
        assert_eq!(noun("games"), Some("game"));
    }
}
